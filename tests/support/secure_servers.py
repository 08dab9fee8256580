"""Servers for tests/deployment/test_security.py: the Redis users docs/security.md documents,
loaded into a private server (through ACL SETUSER or an aclfile), and a server that speaks TLS
only, with certificates made by the openssl command.

Also the worker the security tests run as a child process
(``tests.support.secure_servers:worker``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import anyio
import redis

import rsched
from rsched._devtools.embedded import free_port
from tests.support.paths import DOCS
from tests.support.servers import Server, binary
from tests.support.waiting import WAIT_S

DOC = DOCS / "security.md"
ROLES = ("rsched-scheduler", "rsched-worker", "rsched-client", "rsched-readonly")

worker = rsched.Worker(queues=["default"], concurrency=2)


@worker.task("sec.ok")
async def ok(job: rsched.Job) -> dict[str, str]:
    job.set_progress(1.0, "done")  # the job's log and progress, written under the worker's user
    job.log("ran under ACL")
    return {"ran": job.execution_id}


@worker.task("sec.fail")
async def fail(job: rsched.Job) -> None:
    raise RuntimeError("fails on purpose")


@worker.task("sec.slow")
async def slow(job: rsched.Job) -> None:
    await anyio.sleep(60)  # until cancelled


def documented(form: str = "setuser") -> dict[str, str]:
    """Each role's rules as docs/security.md gives them: ``setuser`` (the ``ACL SETUSER`` lines)
    or ``aclfile`` (the ``user`` lines)."""
    start = r"ACL SETUSER" if form == "setuser" else r"user"
    pattern = rf"^{start} (rsched-\w+) ((?:reset )?on .+)$"
    found = dict(re.findall(pattern, DOC.read_text(), re.MULTILINE))
    assert sorted(found) == sorted(ROLES), f"docs/security.md: {form} lines for {sorted(found)}"
    return found


def password(user: str) -> str:
    return f"{user}-test-pw"


def for_test(rules: str, user: str, prefix: str) -> list[str]:
    """The documented rules adapted as docs/security.md says: another prefix, a password."""
    rules = rules.replace("{rsched}", "{" + prefix + "}").replace("{rsched:", "{" + prefix + ":")
    return re.sub(r"(?<= )>\S+", ">" + password(user), rules).split()


def admin(server: Server) -> Any:
    """The private server's default user (every permission), untyped like the other helpers."""
    return redis.Redis(port=server.port, decode_responses=True)


def load_users(server: Server, prefix: str) -> None:
    """The documented users, for keys of ``prefix``, through ACL SETUSER."""
    root = admin(server)
    for user, rules in documented().items():
        root.execute_command("ACL", "SETUSER", user, *for_test(rules, user, prefix))
    root.execute_command("ACL", "LOG", "RESET")


def user_url(server: Server, user: str) -> str:
    return f"redis://{user}:{password(user)}@127.0.0.1:{server.port}/0"


def denials(server: Server) -> list[str]:
    """What the ACL refused since the users were loaded: ``user: reason object (context)``."""
    entries = admin(server).execute_command("ACL", "LOG")
    out = []
    for entry in entries:
        e = entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2], strict=True))
        out.append(f"{e['username']}: {e['reason']} {e['object']} ({e['context']})")
    return out


# --- TLS ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certs:
    """A CA, a server certificate it signed for 127.0.0.1 and localhost, and a second CA that
    signed nothing the server presents."""

    ca: Path
    cert: Path
    key: Path
    other_ca: Path


def make_certs(directory: Path) -> Certs:
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    for name in ("ca", "other-ca"):
        openssl("req", "-x509", *ec, "-days", "2", "-subj", f"/CN=rsched test {name}",
                "-keyout", f"{name}.key", "-out", f"{name}.pem")  # fmt: skip
    openssl("req", *ec, "-subj", "/CN=127.0.0.1", "-keyout", "server.key", "-out", "server.csr")
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.cnf",
            "-out", "server.pem")  # fmt: skip
    return Certs(
        directory / "ca.pem", directory / "server.pem", directory / "server.key",
        directory / "other-ca.pem",
    )  # fmt: skip


class ArgServer:
    """A private server of ``kind`` on a free 127.0.0.1 port, started with ``args`` in its own
    temporary directory (what servers.Server cannot pass: TLS, an aclfile). ``ping`` is how a
    client of ``kind`` knows it answers; ``start()`` raises :class:`NotStarted` with the end of
    the server's log when it does not come up."""

    def __init__(self, kind: str) -> None:
        found = binary(kind)
        assert found is not None, f"no {kind} binary"
        self.binary = Path(found)
        self.dir = Path(tempfile.mkdtemp(prefix="rsched-secure-"))
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def args(self) -> list[str]:
        return ["--port", str(self.port)]

    def client(self) -> Any:
        return redis.Redis(port=self.port, socket_timeout=1, decode_responses=True)

    def start(self, timeout_s: float = WAIT_S) -> Self:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [str(self.binary), *self.args(), "--dir", str(self.dir), "--logfile", "server.log",
             "--save", "", "--appendonly", "no"],
            cwd=self.dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        client = self.client()
        while True:
            try:
                if client.ping():
                    return self
            except redis.RedisError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.dir / "server.log").read_text(errors="replace").strip()
                self.close()
                raise NotStarted(f"{self.binary.name}: {log[-300:]}")
            time.sleep(0.05)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


class AclFileServer(ArgServer):
    """A server whose users come from an aclfile (``default`` stays an admin for the test)."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(kind)
        (self.dir / "users.acl").write_text("user default on nopass ~* &* +@all\n" + text)

    def args(self) -> list[str]:
        return [*super().args(), "--aclfile", str(self.dir / "users.acl")]


class TlsServer(ArgServer):
    """A server that accepts TLS only (``--port 0 --tls-port P``) on 127.0.0.1 and on 127.0.0.2
    (an address its certificate does not name), with the certificates of :func:`make_certs`."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.certs = make_certs(self.dir)

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def args(self) -> list[str]:
        c = self.certs
        return [
            "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1", "127.0.0.2",
            "--tls-cert-file", str(c.cert), "--tls-key-file", str(c.key),
            "--tls-ca-cert-file", str(c.ca), "--tls-auth-clients", "no",
        ]  # fmt: skip

    def client(self) -> Any:
        return redis.Redis(
            port=self.port, ssl=True, ssl_ca_certs=str(self.certs.ca), socket_timeout=1
        )


class NotStarted(Exception):
    """The server did not come up (e.g. a binary built without TLS)."""
