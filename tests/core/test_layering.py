"""The package's layers, read from the source (``ast``): which subpackage may import which, who may
talk to Redis or call a script, and where exception classes live.

The private subpackages form layers; a module may import its own subpackage and the ones below::

    _core <- _redis <- _store <- _ops <- {_scheduler, _worker, _client} <- _cli <- _devtools
        <- testing

The three in braces never import one another. ``web`` (the dashboard, public) imports the public
``rsched`` API and ``_core`` only, as an application would; ``contrib`` (the frameworks'
integrations, public) the public API and the dashboard. ``testing`` (the test kit, public) is
the top layer: it drives the scheduler's and the worker's own actors.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import rsched

SRC = Path(rsched.__file__).resolve().parent
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_core",),
    ("_redis",),
    ("_store",),
    ("_ops",),
    ("_scheduler", "_worker", "_client"),
    ("_cli",),
    ("_devtools",),
    ("testing",),
)
RANK = {pkg: rank for rank, layer in enumerate(LAYERS) for pkg in layer}
# Every module as a dotted name below rsched (``_store.queues``, ``web._api``); not the package's
# own ``__init__``, which re-exports the public API from every layer.
MODULES = sorted(
    ".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
    for p in SRC.rglob("*.py")
    if p.relative_to(SRC) != Path("__init__.py")
)


def _path(module: str) -> Path:
    base = SRC.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _tree(module: str) -> ast.Module:
    return ast.parse(_path(module).read_text(), filename=str(_path(module)))


def _imports(module: str) -> list[tuple[str, str]]:
    """(imported module, name) of every import; name is '' for ``import x``."""
    found: list[tuple[str, str]] = []
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, alias.name) for alias in node.names]
    return found


def _targets(module: str) -> set[str]:
    """What ``module`` imports of rsched: a subpackage (``_store``), ``web`` or ``rsched`` itself
    (the public API)."""
    out: set[str] = set()
    for source, name in _imports(module):
        if source == "rsched":
            private = name.startswith("_") and not name.startswith("__")
            out.add(name if private or name == "web" else "rsched")
        elif source.startswith("rsched."):
            out.add(source.split(".")[1])
    return out


def _package(module: str) -> str:
    return module.split(".")[0]


def test_every_module_is_in_a_layer_or_web() -> None:
    for module in MODULES:
        assert _package(module) in {*RANK, "web", "contrib", "lua"}, f"{module} is in no layer"


@pytest.mark.parametrize("module", MODULES)
def test_imports_go_down(module: str) -> None:
    package = _package(module)
    for target in _targets(module) - {package}:
        if package == "contrib":
            assert target in {"rsched", "web"}, (
                f"contrib/{module} imports {target}: integrations use the public API"
            )
            continue
        if package == "web":
            assert target in {"rsched", "_core"}, (
                f"web/{module} imports {target}: the dashboard uses the public rsched API and _core"
            )
            continue
        assert target != "web", f"{module} imports the dashboard"
        if target == "rsched":  # the public API re-exports every layer: only the top may use it
            assert RANK[package] >= RANK["_cli"], f"{module} imports the public rsched package"
            continue
        assert RANK[target] < RANK[package], (
            f"{module} imports {target}, which is not below {package} "
            f"(layers: {' <- '.join('|'.join(layer) for layer in LAYERS)})"
        )


@pytest.mark.parametrize("module", [m for m in MODULES if _package(m) == "_core"])
def test_core_does_no_io(module: str) -> None:
    """_core talks to nothing: it is tested without a server, and a rule or a plan can never
    start a round trip by accident."""
    for source, _ in _imports(module):
        assert source.split(".")[0] not in {"redis", "anyio", "socket", "httpx"}, (
            f"{module} imports {source}"
        )


@pytest.mark.parametrize("module", [m for m in MODULES if _package(m) not in {"_redis", "_store"}])
def test_only_the_stores_call_scripts(module: str) -> None:
    """Every script is called from _store/ (one module per key family), so a script's callers are
    found in one place."""
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ClassDef):
            bases = [ast.unparse(base) for base in node.bases]
            assert not any(b.endswith("ScriptCaller") for b in bases), (
                f"{module}.{node.name} calls scripts: move the calls into a store"
            )
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            assert node.func.attr not in ("call_packed", "evalsha", "eval", "fcall"), (
                f"{module}: {ast.unparse(node)}"
            )


def test_client_goes_through_the_stores() -> None:
    """The client calls no Redis command and no script itself: the stores do. (The sync client
    runs the async one on a portal.)"""
    for module in (m for m in MODULES if _package(m) == "_client" and m != "_client.sync_client"):
        for node in ast.walk(_tree(module)):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            func = node.func
            assert func.attr not in ("call", "call_packed", "script"), ast.unparse(node)
            target = func.value
            if isinstance(target, ast.Attribute) and target.attr in ("redis", "_redis"):
                assert func.attr == "aclose", f"{module}: {ast.unparse(node)}"


@pytest.mark.parametrize("module", MODULES)
def test_no_module_imports_a_private_name_of_another(module: str) -> None:
    for source, name in _imports(module):
        if not (source == "rsched" or source.startswith("rsched.")):
            continue
        if source in ("rsched", "rsched.web") or source.count(".") == 1:
            continue  # a private module or subpackage, imported whole
        assert not name.startswith("_"), f"{module} imports {name} from {source}"


@pytest.mark.parametrize("module", MODULES)
def test_exception_classes_live_in_errors(module: str) -> None:
    if module == "_core.errors" or module.endswith("__main__"):  # importing a __main__ runs it
        return
    if _package(module) == "web" or module == "contrib.fastapi":
        pytest.importorskip("fastapi", reason="the web extra is not installed")
    if module.startswith("contrib.django"):
        pytest.importorskip("django", reason="the django extra is not installed")
    loaded = importlib.import_module(f"rsched.{module}")
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ClassDef):
            obj = getattr(loaded, node.name, None)
            assert not (inspect.isclass(obj) and issubclass(obj, BaseException)), (
                f"{module}.{node.name} is an exception class: define it in rsched._core.errors"
            )


def test_each_subpackage_says_what_it_holds_and_may_import() -> None:
    for layer in LAYERS:
        for package in layer:
            doc = ast.get_docstring(_tree(package)) or ""
            assert "import" in doc.lower(), f"{package}/__init__.py: say what it may import"
