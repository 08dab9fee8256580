"""The site's reference pages that are read from the code, made at build time (a mkdocs hook,
mkdocs.yml): settings from ``rsched.Settings``, the command line from its argparse parser, the
HTTP API from the web app's OpenAPI schema and the metrics from their registry. Nothing here is
written to docs/: each page is added to the build as a generated file, so it is never stale and
never committed. ``python docs/gen_reference.py PAGE`` prints one (settings, cli, http, metrics).
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

DOCS = Path(__file__).parent


# --- settings ----------------------------------------------------------------------------------


def _field_comments(model: type[BaseModel]) -> dict[str, str]:
    """The comment lines right above each field in the class body (the settings' descriptions
    live there, as comments saying why, not in ``Field(description=...)``)."""
    # rsched re-exports its public classes under its own name (__module__ is "rsched"): find
    # the class in the module that defines the settings.
    import rsched._core.settings as module

    source = inspect.getsource(module).splitlines()
    start = source.index(next(x for x in source if x.startswith(f"class {model.__name__}(")))
    end = next((i for i in range(start + 1, len(source)) if source[i][:1] not in ("", " ", "#")),
               len(source))  # fmt: skip
    lines = source[start:end]
    found: dict[str, str] = {}
    above: list[str] = []
    for line in lines:
        text = line.strip()
        if text.startswith("#"):
            above.append(text.lstrip("#").strip())
            continue
        m = re.match(r"(\w+)\s*:", text)
        if m and m.group(1) in model.model_fields and above:
            found[m.group(1)] = " ".join(above)
        above = []
    return found


def _doc_meanings() -> dict[str, tuple[str, str]]:
    """The ``default`` and ``meaning`` columns of the hand-written settings tables in docs/*.md
    (``| setting | env | default | meaning |``), by setting name: they say more than the code's
    comments, and what an unset default means."""
    meanings: dict[str, tuple[str, str]] = {}
    for page in sorted(DOCS.glob("*.md")):
        in_table = False
        for line in page.read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if line.startswith("| setting | env | default | meaning"):
                in_table = True
            elif not line.startswith("|"):
                in_table = False
            elif in_table and len(cells) >= 4 and not set(cells[0]) <= {"-"}:
                # Their links are relative to docs/; the reference pages sit one level down.
                text = re.sub(r"\]\((?!https?:|#)", "](../", cells[-1])
                for name in re.findall(r"`([\w.]+)`", cells[0]):
                    meanings.setdefault(name, (cells[2], text))
    return meanings


def _default(info: Any, documented: str) -> str:
    value = info.default_factory() if info.default_factory is not None else info.default
    if value is None:
        # What unset means (a URL, the system's CAs, off) is in the hand-written table.
        return documented or "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value!r}`" if not isinstance(value, str) else f"`{value}`"


def _settings_rows(
    model: type[BaseModel], path: str, env: str, meanings: dict[str, tuple[str, str]]
) -> Iterator[str]:
    comments = _field_comments(model)
    for name, info in model.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            yield from _settings_rows(kind, f"{path}{name}.", f"{env}{name.upper()}__", meanings)
            continue
        setting = f"{path}{name}"
        documented, text = meanings.get(setting, ("", ""))
        text = text or comments.get(name, "")
        if not text:
            raise ValueError(
                f"setting {setting} has no description: add a comment above the field in "
                "rsched/_core/settings.py, or a row to a settings table in docs/"
            )
        signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
        bounds = [f"{signs[k]} {getattr(m, k)}" for m in info.metadata for k in signs
                  if getattr(m, k, None) is not None]  # fmt: skip
        if bounds:
            text = f"{text} ({', '.join(bounds)})" if text else ", ".join(bounds)
        yield f"| `{setting}` | `{env}{name.upper()}` | {_default(info, documented)} | {text} |"


def settings_page() -> str:
    from rsched import Settings

    rows = "\n".join(_settings_rows(Settings, "", "RSCHED_", _doc_meanings()))
    return f"""# Settings

Every field of `rsched.Settings`, read from the code when this site was built. Every process
reads `RSCHED_*` environment variables; nested sections use a double underscore
(`RSCHED_SCHEDULER__LEASE_TTL_MS=15000`), and command-line flags override them.
[Configuration](../configuration.md) says how to use them.

| setting | env | default | meaning |
|---|---|---|---|
{rows}
"""


# --- command line ------------------------------------------------------------------------------


def _commands(
    parser: argparse.ArgumentParser, path: str
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # aliases name the same parser again
                    seen.add(id(sub))
                    yield from _commands(sub, f"{path} {name}")


def cli_page() -> str:
    from rsched._cli import worker_process
    from rsched._cli.parser import build_parser

    parts = [
        "# Command line\n",
        "Each command's `--help`, read from its parser when this site was built. "
        "`rsched-scheduler` and `rsched-worker` are `rsched scheduler` and `rsched worker`.\n",
    ]
    # argparse wraps help to the terminal's width: make it one width, whatever builds the site.
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        for path, parser in _commands(build_parser(), "rsched"):
            level = "#" * min(2 + path.count(" ") - 1, 4) if " " in path else "##"
            parts.append(f"{level} `{path}`\n\n```text\n{parser.format_help().rstrip()}\n```\n")
        worker = worker_process.build_parser().format_help().rstrip()
        parts.append(f"## `rsched-worker`\n\n```text\n{worker}\n```\n")
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return "\n".join(parts)


# --- HTTP API ----------------------------------------------------------------------------------


def http_page() -> str:
    from fastapi import FastAPI

    from rsched import Client
    from rsched.web import create_app

    # The app opens no connection until a request comes: an address nothing listens on will do.
    client = Client.from_url("redis://127.0.0.1:1/0")
    app: Any = create_app(client)
    while not isinstance(app, FastAPI):  # the middleware stack wraps it
        app = app.app
    schema = app.openapi()
    rows = []
    for route, methods in schema["paths"].items():
        for method, op in methods.items():
            # The route's docstring where it has one, else the name FastAPI derives from it.
            text = " ".join((op.get("description") or op.get("summary") or "").split())
            summary = text.replace("|", "\\|")
            params = ", ".join(
                f"`{p['name']}`" for p in op.get("parameters", []) if p.get("in") == "query"
            )
            body = "JSON" if "requestBody" in op else ""
            rows.append(f"| `{method.upper()}` | `{route}` | {summary} | {params} | {body} |")
    return f"""# HTTP API

The routes of `rsched web`'s API ({schema["info"]["title"]}), read from its OpenAPI schema when
this site was built; a running dashboard serves the same schema at `/api/v1/openapi.json`.
[Web dashboard](../dashboard.md) says how to start it, authenticate and what errors look like.

| method | path | what it does | query | body |
|---|---|---|---|---|
{chr(10).join(rows)}
"""


# --- metrics -----------------------------------------------------------------------------------


def _families(roles: tuple[str, ...]) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    from prometheus_client import CollectorRegistry

    from rsched._core.metrics import Deployment, Metrics

    m = Metrics(CollectorRegistry())
    for role in roles:
        m.serve(role)  # type: ignore[arg-type]
    # Some gauges appear only once the deployment has been read: give them one reading.
    m.deployment.current = Deployment(
        1, 1.0, {"late": 0},
        {"q": dict.fromkeys(("length", "pending", "delayed", "dead", "workers"), 0)},
        {"active": 1}, {"customer:{id}": (1, 2)},
    )  # fmt: skip
    found = {}
    for family in m.registry.collect():
        if not family.name.startswith("rsched_"):
            continue  # prometheus_client's own process_* and python_* series
        labels = sorted({k for s in family.samples for k in s.labels if k != "le"})
        found[family.name] = (family.type, family.documentation, tuple(labels))
    return found


def metrics_page() -> str:
    every = _families(())
    scheduler = _families(("scheduler",))
    worker = _families(("worker",))
    names = sorted(set(every) | set(scheduler) | set(worker))
    rows = []
    for name in names:
        kind, doc, labels = every.get(name) or scheduler.get(name) or worker[name]
        who = "every process" if name in every else "scheduler" if name in scheduler else "worker"
        suffix = "_total" if kind == "counter" else ""
        label_text = ", ".join(f"`{x}`" for x in labels)
        rows.append(f"| `{name}{suffix}` | {kind} | {who} | {label_text} | {doc} |")
    return f"""# Metrics

Every Prometheus series rsched exports, read from its registry when this site was built
(labels as far as a process knows them at start). [Monitoring](../monitoring.md) says how to
serve, scrape and alert on them.

| series | type | exported by | labels | help |
|---|---|---|---|---|
{chr(10).join(rows)}
"""


PAGES: dict[str, Callable[[], str]] = {
    "reference/settings.md": settings_page,
    "reference/cli.md": cli_page,
    "reference/http.md": http_page,
    "reference/metrics.md": metrics_page,
}


# Docstrings cross-reference in reST roles (:class:`X`), which mkdocstrings shows as written:
# keep the name, drop the role.
_ROLE = re.compile(r":(?:class|meth|func|attr|data|exc|mod|obj):(?=<code>)")


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """mkdocs hook: the SDK reference's reST roles, as plain code."""
    return _ROLE.sub("", html)


def on_files(files: Any, config: Any) -> Any:
    """mkdocs hook: add the generated pages to the build."""
    from mkdocs.structure.files import File

    for uri, make in PAGES.items():
        files.append(File.generated(config, uri, content=make()))
    return files


if __name__ == "__main__":
    print(PAGES[f"reference/{sys.argv[1]}.md"]())
