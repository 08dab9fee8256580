"""``rsched web``: serve the dashboard and the API with uvicorn.

Binds 127.0.0.1 by default. Any other address needs authentication (``--auth user:password``
or ``--token``, or RSCHED_WEB_AUTH / RSCHED_WEB_TOKEN); without it the command refuses to
start (exit 2). Without authentication only loopback host names are answered. It listens
before it says "serving": an address or port it cannot listen on is one line and exit 2.
Exit codes: 0 stopped, 1 error, 2 usage.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import socket
import sys

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from rsched._core.settings import CLUSTER_HELP, Settings
from rsched.web._security import LOOPBACK_HOSTS


class WebSettings(BaseSettings):
    """``RSCHED_WEB_AUTH`` (user:password) and ``RSCHED_WEB_TOKEN`` (bearer token)."""

    model_config = SettingsConfigDict(env_prefix="RSCHED_WEB_", extra="ignore")

    auth: SecretStr | None = None
    token: SecretStr | None = None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rsched web",
        description="Serve the rsched dashboard and HTTP API (/api/v1).",
        epilog=(
            "examples:\n"
            "  rsched web\n"
            "  rsched web --read-only --port 9000\n"
            "  RSCHED_WEB_AUTH=admin:s3cret rsched web --host 0.0.0.0 --base-path /rsched\n\n"
            "exit codes: 0 stopped, 1 error, 2 usage"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument("--read-only", action="store_true", help="no actions; every write is 403")
    p.add_argument("--base-path", default="", help="serve under this path, e.g. /rsched")
    p.add_argument("--auth", help="user:password for basic auth and the login form")
    p.add_argument("--token", help="bearer token (also accepted by the login form)")
    p.add_argument("--redis-url", help="Redis URL (env RSCHED_REDIS_URL)")
    p.add_argument("--prefix", help="key prefix (env RSCHED_PREFIX)")
    p.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="number of partitions (env RSCHED_PARTITIONS; default: the stored one)",
    )
    p.add_argument("--cluster", action="store_true", default=None, help=CLUSTER_HELP)
    return p


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` (0 picks a free port); raises OSError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn decides
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen()
    except OSError:
        sock.close()
        raise
    return sock


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    env = WebSettings()
    auth = args.auth or (env.auth.get_secret_value() if env.auth else None)
    token = args.token or (env.token.get_secret_value() if env.token else None)
    if not is_loopback(args.host) and not (auth or token):
        print(
            f"rsched web: error: binding {args.host} needs authentication: pass --auth "
            "user:password or --token TOKEN (or set RSCHED_WEB_AUTH / RSCHED_WEB_TOKEN)",
            file=sys.stderr,
        )
        return 2
    if args.base_path and not args.base_path.startswith("/"):
        print("rsched web: error: --base-path must start with '/', e.g. /rsched", file=sys.stderr)
        return 2
    given = {
        "redis_url": args.redis_url,
        "prefix": args.prefix,
        "partitions": args.partitions,
        "cluster": args.cluster,
    }
    try:
        import uvicorn

        from rsched.web import create_app

        settings = Settings(**{k: v for k, v in given.items() if v is not None})
        app = create_app(
            settings=settings,
            read_only=args.read_only,
            base_path=args.base_path,
            auth=auth,
            token=token,
            allowed_hosts=None if (auth or token) else LOOPBACK_HOSTS,
        )
    except ModuleNotFoundError as exc:
        print(f"rsched web: error: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"rsched web: error: {exc}", file=sys.stderr)
        return 2
    try:
        sock = listen(args.host, args.port)
    except OSError as exc:
        print(
            f"rsched web: error: --host / --port: cannot listen on {args.host}:{args.port} "
            f"({exc.strerror or exc}); choose a free --port (or another --host)",
            file=sys.stderr,
        )
        return 2
    port = sock.getsockname()[1]
    where = f"http://{args.host}:{port}{args.base_path.rstrip('/')}/"
    mode = " (read-only)" if args.read_only else ""
    print(f"rsched web: serving {where}{mode}; Ctrl-C stops", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", server_header=False))
    with contextlib.suppress(KeyboardInterrupt):  # the SIGINT uvicorn raises once it stopped
        server.run(sockets=[sock])
    return 0 if server.started else 1


if __name__ == "__main__":
    sys.exit(main())
