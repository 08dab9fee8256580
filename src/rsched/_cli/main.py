"""The ``rsched`` command: schedules, jobs, dead letters, health, workers and runs from a shell.

Exit codes: 0 ok, 1 error (the message says what and how to fix it), 2 usage. Human tables by
default, ``--json`` for scripts. ``rsched scheduler`` and ``rsched worker`` run the two
processes (the same as ``rsched-scheduler`` and ``rsched-worker``), ``rsched demo`` the demo,
``rsched web`` the dashboard. The parser is in rsched._cli.parser, the commands in
rsched._cli.schedules, rsched._cli.queues, rsched._cli.health, rsched._cli.workers,
rsched._cli.limits, rsched._cli.runs and rsched._cli.flows. A command with a ``local`` handler
(``rsched cron``) needs no Redis. Messages are built in the command line's words
(rsched._cli.common.CLI_WORDS): they name commands and flags, not SDK calls.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

import anyio
import orjson
from pydantic import ValidationError
from redis.exceptions import RedisError

from rsched._cli.audit import default_actor
from rsched._cli.common import CLI_WORDS, Handler, LocalHandler, duration_s
from rsched._cli.parser import DELEGATES, build_parser
from rsched._client.client import Client
from rsched._core.errors import RschedError, UsageError
from rsched._core.log import configure_logging
from rsched._core.settings import Settings
from rsched._core.words import speaking
from rsched._redis.connection import explain

__all__ = ("EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "build_parser", "duration_s", "main")

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
#: Global options ``rsched scheduler`` / ``rsched worker`` take over as environment variables.
_GLOBAL_ENV = {
    "--redis-url": "RSCHED_REDIS_URL",
    "--prefix": "RSCHED_PREFIX",
    "--partitions": "RSCHED_PARTITIONS",
    "--durability": "RSCHED_DURABILITY",
}
#: The same for global options without a value.
_GLOBAL_FLAGS = {"--cluster": "RSCHED_CLUSTER"}


def _settings(args: argparse.Namespace) -> Settings:
    given = {
        name: getattr(args, name, None)
        for name in ("redis_url", "prefix", "partitions", "durability", "cluster")
    }
    try:
        return Settings(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        env = "RSCHED_" + "__".join(str(p) for p in first["loc"]).upper()
        flag = {env: f"{flag} / " for flag, env in _GLOBAL_ENV.items()}.get(env, "")
        # A rule across settings has no location; its message names the variables itself.
        where = f"{flag}{env}: " if first["loc"] else ""
        raise UsageError(where + first["msg"].removeprefix("Value error, ")) from None


async def _run(handler: Handler, args: argparse.Namespace, settings: Settings) -> None:
    async with Client.from_settings(settings) as owner:
        # The command's changes are recorded as by RSCHED_ACTOR, else user@host (docs/audit.md).
        client = owner.acting_as(settings.actor or default_actor(), source="cli")
        try:
            await handler(client, args)
        except RedisError as exc:  # a command that talks to Redis beside the Client (sync)
            raise (await explain(exc, settings)) from exc


def _delegate(argv: Sequence[str]) -> int | None:
    """``rsched scheduler …`` / ``rsched worker …`` / ``rsched demo …``: hand over to that
    module's main."""
    rest = list(argv)
    globals_: dict[str, str] = {}
    while rest:
        name, eq, value = rest[0].partition("=")
        if name in _GLOBAL_FLAGS:
            globals_[name], rest = "true", rest[1:]
            continue
        if name not in _GLOBAL_ENV:
            break
        if eq:
            globals_[name], rest = value, rest[1:]
        elif len(rest) > 1:
            globals_[name], rest = rest[1], rest[2:]
        else:
            break
    if not rest or rest[0] not in DELEGATES:
        return None
    for name, value in globals_.items():
        os.environ[{**_GLOBAL_ENV, **_GLOBAL_FLAGS}[name]] = value
    try:
        module = importlib.import_module(DELEGATES[rest[0]][0])
    except ModuleNotFoundError as exc:  # an extra that is not installed (rsched[web])
        print(f"rsched: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    try:
        result = module.main(rest[1:])
    except SystemExit as exc:  # argparse's --help / usage error inside that main
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return int(result or 0)


def _fail(args: argparse.Namespace | None, exc: BaseException, code: int) -> int:
    message = str(exc)
    if args is not None and getattr(args, "json", False):
        doc = {"error": type(exc).__name__, "message": message}
        sys.stderr.write(orjson.dumps(doc).decode() + "\n")
    else:
        print(f"rsched: error: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """Run one ``rsched`` command; returns the exit code (0 ok, 1 error, 2 usage)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    delegated = _delegate(argv)
    if delegated is not None:
        return delegated
    with speaking(CLI_WORDS):
        return _main(argv)


def _main(argv: list[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help or --version: argparse printed it
        return int(exc.code or 0)
    except UsageError as exc:  # a bad flag or value, before --json could be parsed
        return _fail(argparse.Namespace(json="--json" in argv), exc, EXIT_USAGE)
    handler: Handler | None = getattr(args, "handler", None)
    local: LocalHandler | None = getattr(args, "local", None)  # needs no Redis
    if handler is None and local is None:
        # `rsched` or `rsched dead` alone: show what is available.
        target = parser if args.command is None else _subparser(parser, args.command)
        target.print_help(sys.stderr)
        return EXIT_USAGE
    configure_logging("warning")
    try:
        if local is not None:
            local(args)
        elif handler is not None:
            settings = _settings(args)
            anyio.run(_run, handler, args, settings)
    except UsageError as exc:
        return _fail(args, exc, EXIT_USAGE)
    except RschedError as exc:
        return _fail(args, exc, EXIT_ERROR)
    except BrokenPipeError:  # `rsched ls | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:  # e.g. --file that cannot be read
        return _fail(args, exc, EXIT_ERROR)
    except KeyboardInterrupt:
        return 130
    return EXIT_OK


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[name]
            return found
    return parser


if __name__ == "__main__":
    sys.exit(main())
