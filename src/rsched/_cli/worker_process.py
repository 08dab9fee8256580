"""``rsched-worker module:attribute``: load a :class:`rsched.Worker` and run it until signalled
(``--http`` also delivers HTTP targets; ``rsched-worker --http-only`` runs a worker of HTTP
targets alone, with no module of tasks).

At start it waits for a Redis that is down, silent, loading or full (rsched._cli.startup). SIGTERM
or SIGINT stops reading and gives running jobs ``shutdown_grace_period_s`` to finish; the rest
are cancelled and left unacknowledged for another worker; the exit status is 0. A second signal
cancels everything at once (exit status 1). A wrong password or server exits 1; bad settings
(a --metrics-port in use among them) exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
from collections.abc import Sequence

import anyio

from rsched._cli.signals import two_signal_stop
from rsched._cli.startup import sole, wait_for_server
from rsched._core.errors import ConfigError, RschedError
from rsched._core.keys import Keys
from rsched._core.log import configure_logging, get_logger
from rsched._core.settings import CLUSTER_HELP, Settings
from rsched._redis.connection import check_server, connect
from rsched._redis.durability import durability_flag
from rsched._store.deployment import deployment_keys
from rsched._worker.readiness import operate_worker
from rsched._worker.worker import Worker

log = get_logger("rsched.worker")

#: The longest wait for a connection to close (a hung server cannot hold the exit).
CLOSE_TIMEOUT_S = 2.0
#: What ``--django`` runs: the worker of the project Django is set up with.
DJANGO_WORKER = "rsched.contrib.django:worker"


def load_worker(spec: str) -> Worker:
    """Import ``module:attribute`` (the current directory is importable) and return the Worker."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"worker {spec!r}: give it as module:attribute, e.g. myapp.tasks:worker")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"worker {spec!r}: cannot import {module_name!r} ({exc})") from None
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"worker {spec!r}: {module_name!r} has no {attr!r}") from None
    if not isinstance(obj, Worker):
        raise ConfigError(f"worker {spec!r} is a {type(obj).__name__}, not an rsched.Worker")
    return obj


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``rsched-worker`` (``rsched worker``); the CLI reference prints its help."""
    parser = argparse.ArgumentParser(
        prog="rsched-worker",
        description="Run the task handlers of an rsched.Worker on jobs from its queues.",
    )
    parser.add_argument(
        "worker",
        nargs="?",
        help="the Worker object, as module:attribute (none with --django or --http-only)",
    )
    parser.add_argument(
        "--http",
        action="store_true",
        default=None,
        help="also deliver HTTP targets, task rsched.http (RSCHED_WORKER__HTTP; needs the http "
        "extra; docs/http-targets.md)",
    )
    parser.add_argument(
        "--http-only",
        action="store_true",
        help="deliver HTTP targets only: a worker with no Python tasks (give no worker)",
    )
    parser.add_argument(
        "--django",
        metavar="SETTINGS_MODULE",
        help="run the tasks of this Django project (its DJANGO_SETTINGS_MODULE) instead of a "
        "Worker object: the worker of rsched.contrib.django (docs/django.md)",
    )
    parser.add_argument("--queues", help="comma-separated queue names (RSCHED_WORKER__QUEUES)")
    parser.add_argument("--concurrency", type=int, help="jobs run at once (default 10)")
    parser.add_argument("--redis-url", help="redis://host:port/db (RSCHED_REDIS_URL)")
    parser.add_argument("--prefix", help="key prefix (RSCHED_PREFIX)")
    parser.add_argument("--cluster", action="store_true", default=None, help=CLUSTER_HELP)
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve /metrics, /livez and /readyz on PORT (RSCHED_METRICS_PORT; off when unset)",
    )
    parser.add_argument(
        "--metrics-host", metavar="HOST", help="address of --metrics-port (127.0.0.1)"
    )
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", choices=["text", "json"])
    durability_flag(parser)
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.http_only and (args.worker is not None or args.django is not None):
        parser.error("--http-only runs no Python tasks: give no worker, or --http instead")
    if args.worker is not None and args.django is not None:
        parser.error("give a Worker as module:attribute or --django SETTINGS_MODULE, not both")
    if not args.http_only and args.worker is None and args.django is None:
        parser.error(
            "give a Worker as module:attribute, or --django SETTINGS_MODULE, or --http-only"
        )
    return args


async def check_start(settings: Settings) -> None:
    """Wait until the server can serve this worker (one that is down, silent, loading or full
    is waited for); fail at once, in one line, when it never can (a wrong URL, password or
    server; another number of partitions than the deployment's: PartitionMismatch)."""
    redis = connect(settings)

    async def check() -> None:
        await check_server(redis, settings, Keys(settings.prefix).leader)
        await deployment_keys(redis, settings)

    try:
        await wait_for_server(check, settings, log)
    finally:
        with anyio.move_on_after(CLOSE_TIMEOUT_S, shield=True):
            await redis.aclose()


async def serve(worker: Worker, settings: Settings | None = None) -> int:
    """Run ``worker`` until SIGTERM/SIGINT; returns the exit status. With ``settings``, the
    server is waited for and checked first (:func:`check_start`; raises its RschedError)."""
    status = 0
    failed: RschedError | None = None
    start_up = anyio.CancelScope()  # a stop during the check does not wait for the server
    async with anyio.create_task_group() as tg:

        def graceful(name: str) -> None:
            log.info("worker.signal", signal=name, action="drain")
            start_up.cancel()
            worker.stop()

        def immediate(name: str) -> None:
            nonlocal status
            log.warning("worker.signal", signal=name, action="exit")
            status = 1
            worker.stop(graceful=False)
            tg.cancel_scope.cancel()

        await tg.start(two_signal_stop, graceful, immediate)
        resolved = settings or worker.resolve_settings()
        # /livez answers while Redis is waited for too; a port in use stops us (exit 2).
        if resolved.metrics_port is not None:
            await tg.start(operate_worker, worker, resolved)
        with start_up:
            try:
                if settings is not None:
                    await check_start(settings)
            except RschedError as exc:  # raised below, outside the task group
                failed = exc
        if failed is None and not worker.stopping:
            await worker.run()
        tg.cancel_scope.cancel()
    if failed is not None:
        raise failed
    return status


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.django is not None:
            os.environ["DJANGO_SETTINGS_MODULE"] = args.django
            args.worker = DJANGO_WORKER
        worker = Worker(http=True) if args.http_only else load_worker(args.worker)
        queues = [q.strip() for q in args.queues.split(",") if q.strip()] if args.queues else None
        worker.configure(
            queues=queues,
            concurrency=args.concurrency,
            redis_url=args.redis_url,
            prefix=args.prefix,
            cluster=args.cluster,
            metrics_port=args.metrics_port,
            metrics_host=args.metrics_host,
            durability=args.durability,
            http=True if args.http_only else args.http,
        )
        settings = worker.resolve_settings()
        if not worker.tasks and not settings.worker.http:
            raise ConfigError(
                f"worker {args.worker!r} has no tasks registered: register handlers with "
                "@worker.task(name) in that module"
            )
    except RschedError as exc:
        print(f"rsched-worker: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_level or settings.log_level, args.log_format or settings.log_format)
    try:
        status = anyio.run(serve, worker, settings)
    except KeyboardInterrupt:
        status = 1
    except Exception as exc:
        # A task group wraps what its task raised (a --metrics-port in use, a mismatch found as
        # the worker starts): an error rsched explains is one line all the same.
        error = sole(exc)
        if not isinstance(error, RschedError):
            raise
        if isinstance(error, ConfigError):  # e.g. PartitionMismatch: bad settings, like above
            log.error("worker.config_error", error=str(error))
            status = 2
        else:  # e.g. a wrong password: one line that names the fix
            log.error("worker.failed", error=str(error))
            status = 1
        print(f"rsched-worker: {error}", file=sys.stderr)
    log.info("worker.exit", status=status)
    if any(
        t.is_alive() and not t.daemon
        for t in threading.enumerate()
        if t is not threading.main_thread()
    ):
        # A sync handler still running in a thread cannot be interrupted; do not wait for it.
        sys.stderr.flush()
        os._exit(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
