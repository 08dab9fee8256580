"""``rsched-scheduler``: the scheduler process (settings, logging, signals, exit codes).

Settings come from ``RSCHED_*`` environment variables, overridden by the flags given. At start it
waits for a Redis that is down, silent, loading or full (rsched._cli.startup). Exit codes: 0 after a
clean stop (SIGTERM/SIGINT: the batch in flight finishes and the lease is released), 1 on a
fatal error (a wrong password or server, ...) or a forced stop (a second signal), 2 for bad
settings (a --metrics-port in use among them) or a bad schedules file.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus
from pydantic import ValidationError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from rsched._cli.signals import two_signal_stop
from rsched._cli.startup import sole, wait_for_server
from rsched._core.errors import ConfigError, InvalidSchedule, RschedError
from rsched._core.keys import Keys
from rsched._core.log import configure_logging, get_logger
from rsched._core.settings import CLUSTER_HELP, DEFAULT_REDIS_URL, Settings
from rsched._redis.connection import check_server, connect, translate, warn_if_unsafe
from rsched._redis.durability import durability_flag
from rsched._scheduler.readiness import operate_scheduler
from rsched._scheduler.scheduler import Scheduler

log = get_logger("rsched.scheduler")

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
#: The longest wait for the connections to close on the way out (a hung server cannot hold us).
CLOSE_TIMEOUT_S = 2.0

# Flag -> (path in Settings, environment variable), for overrides and error messages.
_FLAGS: dict[str, tuple[tuple[str, ...], str]] = {
    "redis_url": (("redis_url",), "RSCHED_REDIS_URL"),
    "prefix": (("prefix",), "RSCHED_PREFIX"),
    "partitions": (("partitions",), "RSCHED_PARTITIONS"),
    "cluster": (("cluster",), "RSCHED_CLUSTER"),
    "lease_ttl_ms": (("scheduler", "lease_ttl_ms"), "RSCHED_SCHEDULER__LEASE_TTL_MS"),
    "lease_renew_ms": (("scheduler", "lease_renew_ms"), "RSCHED_SCHEDULER__LEASE_RENEW_MS"),
    "log_level": (("log_level",), "RSCHED_LOG_LEVEL"),
    "log_format": (("log_format",), "RSCHED_LOG_FORMAT"),
    "metrics_port": (("metrics_port",), "RSCHED_METRICS_PORT"),
    "metrics_host": (("metrics_host",), "RSCHED_METRICS_HOST"),
    "durability": (("durability",), "RSCHED_DURABILITY"),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rsched-scheduler",
        description=(
            "Run an rsched scheduler. Any number may run against one Redis; they share the "
            "deployment's partitions (one leads each partition at a time) and fire due "
            "schedules into the queue streams. Flags override RSCHED_* environment variables."
        ),
        epilog=(
            "examples:\n"
            "  rsched-scheduler --redis-url redis://127.0.0.1:6379/0\n"
            "  RSCHED_PREFIX=staging rsched-scheduler --schedules schedules.toml\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--redis-url", help=f"Redis URL (RSCHED_REDIS_URL; {DEFAULT_REDIS_URL})")
    parser.add_argument("--prefix", help="key prefix (RSCHED_PREFIX; default rsched)")
    parser.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="the deployment's number of partitions (RSCHED_PARTITIONS; default: the stored one, "
        "1 for a new deployment); another number than the stored one exits with status 2",
    )
    parser.add_argument("--cluster", action="store_true", default=None, help=CLUSTER_HELP)
    parser.add_argument("--lease-ttl-ms", type=int, help="leader lease time to live (10000)")
    parser.add_argument("--lease-renew-ms", type=int, help="lease renew period (2000)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", choices=["text", "json"])
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve /metrics, /livez and /readyz on PORT (RSCHED_METRICS_PORT; off when unset)",
    )
    parser.add_argument(
        "--metrics-host", metavar="HOST", help="address of --metrics-port (127.0.0.1)"
    )
    durability_flag(parser)
    parser.add_argument(
        "--schedules", type=Path, metavar="FILE", help="sync schedules from FILE at start"
    )
    return parser


def load_settings(args: argparse.Namespace) -> Settings:
    """Settings from the environment with the given flags on top; raises ConfigError."""
    try:
        data: dict[str, Any] = Settings().model_dump()
        for flag, (path, _) in _FLAGS.items():
            value = getattr(args, flag)
            if value is None:
                continue
            target = data
            for part in path[:-1]:
                target = target[part]
            target[path[-1]] = value
        return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    by_path = {path: (flag, env) for flag, (path, env) in _FLAGS.items()}
    lines = []
    for err in exc.errors():
        path = tuple(str(p) for p in err["loc"])
        flag_env = by_path.get(path)
        if flag_env is not None:
            name = f"--{flag_env[0].replace('_', '-')} / {flag_env[1]}"
        else:
            name = "RSCHED_" + "__".join(path).upper() if path else "settings"
        lines.append(f"{name}: {err['msg'].removeprefix('Value error, ')}")
    return "invalid settings: " + "; ".join(lines)


async def _sync_schedules(redis: Redis, settings: Settings, path: Path) -> None:
    from rsched._client.schedules_file import sync_file  # only this option needs schedules files

    try:
        await sync_file(redis, settings, path)
    except RedisError:
        raise  # Redis trouble is not a problem with the file
    except (RschedError, OSError, ValueError) as exc:
        raise ConfigError(f"--schedules {path}: {exc}") from exc


async def _start_up(scheduler: Scheduler, settings: Settings, schedules: Path | None) -> None:
    """Check the server (a wrong URL, password or server stops us here, in one line), learn the
    deployment's number of partitions (another one configured: PartitionMismatch), warn about
    unsafe server settings and sync the schedules file. Raises redis' errors: the caller waits
    for a server that is down and tries again."""
    redis = scheduler.redis
    await check_server(redis, settings, Keys(settings.prefix).leader)
    await scheduler.resolve()
    await warn_if_unsafe(redis, log)  # once the server answered: one that is down is no warning
    if schedules is not None:
        await _sync_schedules(redis, settings, schedules)


async def _serve(settings: Settings, schedules: Path | None) -> int:
    redis = connect(settings)
    scheduler = Scheduler(redis, settings)
    stopping = False
    failed: RschedError | None = None
    # A stop during start-up does not wait for a server that does not answer.
    start_up = anyio.CancelScope()

    def graceful(name: str) -> None:
        nonlocal stopping
        stopping = True
        log.info("scheduler.stopping", signal=name)
        start_up.cancel()
        scheduler.stop()

    def immediate(name: str) -> None:
        log.warning("scheduler.forced_exit", signal=name)
        for handler in logging.getLogger("rsched").handlers:
            handler.flush()
        os._exit(EXIT_ERROR)

    try:
        async with anyio.create_task_group() as tg:

            async def run_scheduler(*, task_status: TaskStatus[None]) -> None:
                await scheduler.run(task_status=task_status)
                tg.cancel_scope.cancel()  # stopped cleanly: stop watching for signals

            # Signals are handled from the very start, so a stop during start-up is clean too.
            await tg.start(two_signal_stop, graceful, immediate)
            # /livez answers while Redis is waited for too; a port in use stops us (exit 2).
            if settings.metrics_port is not None:
                await tg.start(operate_scheduler, scheduler, settings)
            with start_up:
                try:
                    start = functools.partial(_start_up, scheduler, settings, schedules)
                    await wait_for_server(start, settings, log)
                except RschedError as exc:  # raised below, outside the group
                    failed = exc
            if failed is not None or stopping:
                tg.cancel_scope.cancel()
            else:
                await tg.start(run_scheduler)
                log.info(
                    "scheduler.ready",
                    owner=scheduler.owner,
                    prefix=settings.prefix,
                    partitions=scheduler.partitions,
                    lease_ttl_ms=settings.scheduler.lease_ttl_ms,
                )
    finally:
        with anyio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
            await redis.aclose()
    if failed is not None:
        raise failed
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Run the scheduler until SIGTERM/SIGINT; returns the process exit code."""
    args = _parser().parse_args(argv)
    try:
        settings = load_settings(args)
    except ConfigError as exc:
        print(f"rsched-scheduler: {exc}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(settings.log_level, settings.log_format)
    try:
        return anyio.run(_serve, settings, args.schedules)
    except KeyboardInterrupt:
        return EXIT_ERROR
    except Exception as exc:
        return _failed(exc, settings)


def _failed(exc: Exception, settings: Settings) -> int:
    """Report what stopped the scheduler; returns the exit code. An error rsched or Redis
    explains is one line naming the fix (also when a task group wrapped it); anything else is
    an actor that crashed: one line, then the traceback."""
    error = sole(exc)
    if isinstance(error, RedisError):
        error = translate(error, settings)
    if isinstance(error, ConfigError | InvalidSchedule):
        log.error("scheduler.config_error", error=str(error))
        print(f"rsched-scheduler: {error}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(error, RschedError):  # e.g. a wrong password
        log.error("scheduler.failed", error=str(error))
        print(f"rsched-scheduler: {error}", file=sys.stderr)
        return EXIT_ERROR
    log.error("scheduler.crashed", error=repr(exc))
    traceback.print_exception(exc)
    return EXIT_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
