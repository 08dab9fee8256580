"""HTTP targets: a schedule or a job that calls a URL instead of a Python task (pure).

A target is a dict (``Schedule(http={...})``, ``Client.enqueue(http={...})``, a schedules
file's ``[schedule.http]`` table): ``url`` (http or https), ``method`` (default POST),
``headers`` (text to text), ``body`` (a dict or list is sent as JSON, text as it is),
``timeout_s`` (default 10 s), ``secret`` (signs the call; else the deployment's
``http.secret``) and ``follow_redirects`` (default false). Its job is of the built-in task
``rsched.http`` with the target as its payload (``{"http": {...}}``); a worker started with
``--http`` delivers it (rsched._worker.http_caller, docs/http-targets.md).

The SSRF guard's rule (which addresses a worker refuses to connect to) lives here too, so that
it is tested without a network.
"""

from __future__ import annotations

import email.utils
import ipaddress
import math
import urllib.parse
from collections.abc import Mapping
from typing import Any

import orjson

from rsched._core.errors import InvalidArgument, InvalidJob

#: The built-in task of an HTTP target's jobs.
HTTP_TASK = "rsched.http"
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
#: Methods that send no body.
_BODILESS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_METHOD = "POST"
DEFAULT_TIMEOUT_S = 10.0
MIN_TIMEOUT_S = 0.1
MAX_TIMEOUT_S = 900.0
MAX_URL_CHARS = 2048
MAX_HEADERS = 50
MAX_SECRET_CHARS = 512
_KEYS = ("url", "method", "headers", "body", "timeout_s", "secret", "follow_redirects")
#: Headers the worker sets itself (compared in lower case): a target may not give them.
RESERVED_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "idempotency-key"}
)
_RESERVED_PREFIX = "x-rsched-"
# RFC 9110 token characters of a header name.
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _bad(name: str, message: str) -> InvalidArgument:
    return InvalidArgument(f"http.{name}" if name else "http", message)


def check_target(value: object) -> dict[str, Any]:
    """The target ``value`` checked and normalised (method in capitals, timeout in seconds),
    only the keys given kept. Raises InvalidArgument naming the key (``http.url``, ...)."""
    if isinstance(value, str | bytes):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise _bad("", f"is not valid JSON ({exc})") from None
    if not isinstance(value, Mapping):
        raise _bad(
            "", f'must be a dict such as {{"url": "https://..."}}, not {type(value).__name__}'
        )
    unknown = sorted(str(k) for k in value if k not in _KEYS)
    if unknown:
        raise _bad(unknown[0], f"unknown key; a target's keys are {', '.join(_KEYS)}")
    if "url" not in value:
        raise _bad("url", 'required, e.g. "https://example.com/hook"')
    out: dict[str, Any] = {"url": _url(value["url"])}
    method = _method(value.get("method", DEFAULT_METHOD))
    if "method" in value:
        out["method"] = method
    if value.get("headers") is not None:
        out["headers"] = _headers(value["headers"])
    if value.get("body") is not None:
        if method in _BODILESS:
            raise _bad(
                "body", f"a {method} sends no body: give method POST, PUT or PATCH, or no body"
            )
        out["body"] = _body(value["body"])
    if value.get("timeout_s") is not None:
        out["timeout_s"] = _timeout(value["timeout_s"])
    if value.get("secret") is not None:
        out["secret"] = _secret(value["secret"])
    if value.get("follow_redirects") is not None:
        if not isinstance(value["follow_redirects"], bool):
            raise _bad("follow_redirects", "must be true or false")
        out["follow_redirects"] = value["follow_redirects"]
    return out


def _url(url: object) -> str:
    if not isinstance(url, str) or not url:
        raise _bad("url", 'must be text, e.g. "https://example.com/hook"')
    if len(url) > MAX_URL_CHARS:
        raise _bad("url", f"is {len(url)} characters, over {MAX_URL_CHARS}")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise _bad("url", "holds a space or a control character; percent-encode it (%20)")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise _bad("url", f"scheme must be http or https, not {parts.scheme or 'none'!r}")
    if not parts.hostname:
        raise _bad("url", 'has no host, e.g. "https://example.com/hook"')
    if parts.username is not None or parts.password is not None:
        raise _bad(
            "url", "holds credentials (user:password@); send them in http.headers (Authorization)"
        )
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise _bad("url", "has a port that is not a number from 0 to 65535") from None
    return url


def _method(method: object) -> str:
    name = method.upper() if isinstance(method, str) else method
    if name not in METHODS:
        raise _bad("method", f"must be one of {', '.join(METHODS)}, not {method!r}")
    return str(name)


def _headers(headers: object) -> dict[str, str]:
    if not isinstance(headers, Mapping):
        raise _bad(
            "headers", 'must be a dict of text to text, e.g. {"Authorization": "Bearer ..."}'
        )
    if len(headers) > MAX_HEADERS:
        raise _bad("headers", f"gives {len(headers)} headers, more than {MAX_HEADERS}")
    out: dict[str, str] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not name or not set(name) <= _TOKEN:
            raise _bad("headers", f"{name!r} is not a header name (letters, digits, - and _)")
        low = name.lower()
        if low in RESERVED_HEADERS or low.startswith(_RESERVED_PREFIX):
            raise _bad(
                f"headers.{name}", "is set by rsched itself (docs/http-targets.md); leave it out"
            )
        if not isinstance(value, str):
            raise _bad(f"headers.{name}", f"must be text, not {type(value).__name__}")
        if any(c in value for c in "\r\n\0"):
            raise _bad(f"headers.{name}", "holds a line break or NUL")
        out[name] = value
    return out


def _body(body: object) -> Any:
    if isinstance(body, str):
        return body
    if not isinstance(body, dict | list):
        raise _bad(
            "body", f"must be a dict or list (sent as JSON) or text, not {type(body).__name__}"
        )
    try:
        orjson.dumps(body)
    except TypeError as exc:
        raise _bad("body", f"is not JSON-serialisable ({exc})") from None
    return body


def _timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise _bad("timeout_s", f"must be a number of seconds, not {value!r}")
    if not MIN_TIMEOUT_S <= value <= MAX_TIMEOUT_S:
        raise _bad(
            "timeout_s", f"must be {MIN_TIMEOUT_S:g} to {MAX_TIMEOUT_S:g} seconds, not {value:g}"
        )
    return float(value)


def _secret(value: object) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_SECRET_CHARS:
        raise _bad("secret", f"must be text of 1 to {MAX_SECRET_CHARS} characters")
    return value


def target_job(
    task: str | None, payload: Mapping[str, Any] | None, http: object
) -> tuple[str, dict[str, Any] | None]:
    """The task and payload of a job to enqueue: its own, or with ``http`` an HTTP target's
    (rsched.http, the target as its payload). Raises InvalidJob naming the field."""
    if http is None:
        if task is None:
            raise InvalidJob("task", "give a task name, or http={...} to call a URL")
        if task != HTTP_TASK:
            return task, None if payload is None else dict(payload)
        # The built-in task named with its payload (rsched enqueue, the HTTP API): checked
        # as the target it must hold.
        if not isinstance(payload, Mapping) or set(payload) != {"http"}:
            raise InvalidJob(
                "payload", f'{HTTP_TASK} takes {{"http": {{"url": ...}}}}, or give http='
            )
        task, http, payload = None, payload["http"], None
    if task is not None:
        raise InvalidJob("task", "give a task or http, not both")
    if payload is not None:
        raise InvalidJob("payload", "an HTTP target sends its body: give http.body, not payload")
    try:
        return HTTP_TASK, {"http": check_target(http)}
    except InvalidArgument as exc:
        raise InvalidJob(exc.field, exc.message) from None


def request_body(target: Mapping[str, Any]) -> tuple[bytes, str | None]:
    """The bytes a target sends and their content type (None: the target's own header, if
    any): a dict or list as JSON, text as UTF-8, nothing as empty."""
    body = target.get("body")
    if body is None:
        return b"", None
    if isinstance(body, str):
        return body.encode(), None
    return orjson.dumps(body), "application/json"


def display(target: Mapping[str, Any]) -> str:
    """``METHOD url``: a target as the CLI and logs show it (never its secret or headers)."""
    return f"{target.get('method', DEFAULT_METHOD)} {target.get('url', '?')}"


def masked(target: Mapping[str, Any]) -> dict[str, Any]:
    """The target with its secret hidden: what the CLI prints (never the secret itself)."""
    return {**target, "secret": "***"} if "secret" in target else dict(target)


def retry_after_s(value: str | None, now_s: float) -> float | None:
    """The seconds a ``Retry-After`` header asks to wait (a number of seconds or an HTTP date,
    RFC 9110), or None when it is missing or unreadable; never below 0."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT
        return None
    return max(0.0, when.timestamp() - now_s)


def refusal(address: str) -> str | None:
    """Why the SSRF guard refuses to connect to ``address`` (an IP address as text), or None
    when it may. An IPv4 address mapped into IPv6 (::ffff:a.b.c.d), or embedded by 6to4 or
    Teredo, is judged as the IPv4 address it reaches."""
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(
            address.split("%", 1)[0]  # a zone index (fe80::1%eth0)
        )
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if inner is not None:
            why = refusal(str(inner))
            return None if why is None else f"{ip} reaches {why}"
        # NAT64 (64:ff9b::/96) reaches the IPv4 address in its last 32 bits.
        if ip in _NAT64:
            why = refusal(str(ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF)))
            return None if why is None else f"{ip} reaches {why}"
    for kind in ("unspecified", "loopback", "link_local", "multicast", "reserved", "private"):
        if getattr(ip, f"is_{kind}"):
            return f"{ip} is a {kind.replace('_', '-')} address"
    if not ip.is_global:  # shared (100.64/10), benchmarking, documentation, ...
        return f"{ip} is not a public address"
    return None


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
