"""Who may do what: authentication, CSRF, read-only mode, host and origin checks, headers.

One ASGI middleware (:class:`Guard`) runs before every route, static files included:

- **Host.** ``allowed_hosts`` (``rsched web`` without authentication: loopback names only)
  refuses other ``Host`` headers, so a DNS-rebinding page cannot talk to a local dashboard.
- **Authentication** (when configured): ``Authorization: Basic`` (``--auth user:password``),
  ``Authorization: Bearer`` (``--token``), or the session cookie the login form sets, whose
  value is an HMAC of the configured secrets (so it never contains them, and changing them
  logs everyone out). Secrets are compared in constant time. Pages redirect to the login
  form; the API answers 401.
- **Cross-site writes.** A write whose ``Origin`` is another host, or that a browser marks
  ``Sec-Fetch-Site: cross-site|same-site``, is refused (403) whoever sent it.
- **Read-only** refuses every write (403), API and forms alike (the login form excepted).
- **CSRF** (double-submit cookie): every page sets a random ``rsched_csrf`` cookie
  (HttpOnly, SameSite=Strict) and puts the same value in its forms (``csrf_token``) and in
  htmx's ``X-CSRF-Token`` header. A form post must carry it (checked where the form is read,
  see ``_pages``); an API write authenticated by the session cookie must send the header.
  API writes authenticated by a header (bearer or basic) need no token: a browser never adds
  those to a cross-site request on its own.
- **Headers** on every answer: a Content-Security-Policy allowing only this origin's scripts
  and styles (no inline script anywhere), ``frame-ancestors 'none'``, X-Frame-Options,
  X-Content-Type-Options, Referrer-Policy.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import quote, urlsplit

import orjson

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SESSION_COOKIE = "rsched_session"
CSRF_COOKIE = "rsched_csrf"
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf_token"
#: The key of the request's state naming the signed-in user (Guard.actor).
ACTOR_STATE = "rsched_actor"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


def same(a: str, b: str) -> bool:
    """Constant-time equality of two secrets."""
    return hmac.compare_digest(a.encode(), b.encode())


@dataclass(frozen=True, slots=True)
class Auth:
    """The configured credentials: ``basic`` ("user:password") and/or a bearer ``token``."""

    basic: str | None = None
    token: str | None = None

    def __post_init__(self) -> None:
        if self.basic is not None and ":" not in self.basic:
            raise ValueError("auth must be user:password, e.g. --auth admin:s3cret")
        if self.basic == ":" or self.token == "":
            raise ValueError("auth and token must not be empty")

    @property
    def enabled(self) -> bool:
        return bool(self.basic or self.token)

    @property
    def session(self) -> str:
        """The session cookie's value: proves a login without holding the secrets."""
        key = f"{self.basic or ''}\0{self.token or ''}".encode()
        return hmac.new(key, b"rsched-web-session", hashlib.sha256).hexdigest()

    def header_ok(self, authorization: str) -> bool:
        scheme, _, value = authorization.partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and self.token:
            return same(value, self.token)
        if scheme.lower() == "basic" and self.basic:
            try:
                given = base64.b64decode(value, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                return False
            return same(given, self.basic)
        return False

    def login_ok(self, user: str, password: str, token: str) -> bool:
        """The login form: user and password, or the token."""
        ok = False
        if self.basic:
            ok |= same(f"{user}:{password}", self.basic)
        if self.token and token:
            ok |= same(token, self.token)
        return ok


def cookies(scope: Scope) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            try:
                jar.load(value.decode("latin-1"))
            except Exception:
                continue
    return {k: m.value for k, m in jar.items()}


def header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return ""


def new_token() -> str:
    return secrets.token_urlsafe(24)


def csrf_ok(scope: Scope, given: str | None) -> bool:
    expected = cookies(scope).get(CSRF_COOKIE, "")
    return bool(expected and given) and same(expected, given or "")


def cookie_header(name: str, value: str, path: str, max_age: int | None = None) -> bytes:
    text = f"{name}={value}; Path={path or '/'}; HttpOnly; SameSite=Strict"
    if max_age is not None:
        text += f"; Max-Age={max_age}"
    return text.encode("latin-1")


@dataclass(frozen=True, slots=True)
class Policy:
    auth: Auth
    read_only: bool
    allowed_hosts: tuple[str, ...] | None


class Guard:
    """The ASGI middleware described in the module docstring."""

    def __init__(self, app: ASGIApp, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        refusal = self.refusal(scope)
        if refusal is None:
            if scope.get("method", "GET") not in _SAFE_METHODS:
                # Who the audit trail records a write as made by (rsched.web._api.sdk).
                scope.setdefault("state", {})[ACTOR_STATE] = self.actor(scope)
            await self.app(scope, receive, send_with_headers)
        else:
            await refusal(scope, receive, send_with_headers)

    def actor(self, scope: Scope) -> str | None:
        """The signed-in user of an authenticated request: the user name of ``--auth``
        (basic, or the session of a login with it), ``token`` for the bearer token (or a
        session with only a token configured); None without authentication."""
        auth = self.policy.auth
        if not auth.enabled:
            return None
        user = auth.basic.partition(":")[0] if auth.basic else None
        scheme = header(scope, b"authorization").partition(" ")[0].lower()
        if scheme == "bearer":
            return "token"
        return user or "token"

    def refusal(self, scope: Scope) -> ASGIApp | None:
        p = self.policy
        path = scope.get("path", "")
        local = path[len(scope.get("root_path", "")) :] if scope.get("root_path") else path
        api = local.startswith("/api/")
        method = scope.get("method", "GET")
        if p.allowed_hosts is not None:
            host = _host_name(header(scope, b"host"))
            if host not in p.allowed_hosts:
                return _refuse(
                    api,
                    400,
                    "BadHost",
                    f"host {host!r} is not served here; without --auth/--token rsched web "
                    "answers loopback names only (127.0.0.1, localhost)",
                )
        by_cookie = False
        if p.auth.enabled and not local.startswith(("/static/", "/login")):
            authorization = header(scope, b"authorization")
            if authorization and p.auth.header_ok(authorization):
                pass
            elif same(cookies(scope).get(SESSION_COOKIE, ""), p.auth.session):
                by_cookie = True
            elif api or method not in _SAFE_METHODS:
                return _refuse(True, 401, "Unauthorized", "authenticate: bearer token or basic")
            else:
                target = quote(scope.get("root_path", "") + local, safe="/")
                return _redirect(f"{scope.get('root_path', '')}/login?next={target}")
        if method in _SAFE_METHODS:
            return None
        if not _same_origin(scope):
            return _refuse(api, 403, "CrossSite", "cross-site writes are refused (CSRF)")
        if p.read_only and not local.startswith("/login"):
            return _refuse(api, 403, "ReadOnly", "this dashboard is read-only (--read-only)")
        if api and by_cookie and not csrf_ok(scope, header(scope, CSRF_HEADER.encode())):
            return _refuse(True, 403, "CSRFError", "send the X-CSRF-Token header of the page")
        return None


def _host_name(host: str) -> str:
    """``example.org:8080`` -> ``example.org``; ``[::1]:80`` -> ``[::1]``."""
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _same_origin(scope: Scope) -> bool:
    site = header(scope, b"sec-fetch-site")
    if site in ("cross-site", "same-site"):
        return False
    origin = header(scope, b"origin")
    if not origin or origin == "null":
        return origin != "null"
    return urlsplit(origin).netloc == header(scope, b"host")


def _refuse(api: bool, status: int, error: str, message: str) -> ASGIApp:
    if api:
        body = orjson.dumps({"error": error, "message": message, "field": None})
        kind = b"application/json"
    else:
        body = f"{status} {error}: {message}\n".encode()
        kind = b"text/plain; charset=utf-8"
    headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="rsched"'))
    return _respond(status, headers, body)


def _redirect(location: str) -> ASGIApp:
    return _respond(303, [(b"location", location.encode()), (b"content-length", b"0")], b"")


def _respond(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app
