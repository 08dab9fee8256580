"""Opening Redis connections the same way everywhere (scheduler, worker, client, CLI), and saying
what a failure means in one line that names the fix.

Waiting is bounded: every read and every connect gives up after ``socket_timeout_s``, and a
timed-out command is never re-sent (only a refused or dropped connection is retried, which fails
fast), so no call waits much longer than the setting. The pool is bounded too: past
``max_connections`` a call waits for a free connection, for at most ``pool_timeout_s``.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import anyio
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    AskError,
    AuthenticationError,
    InvalidResponse,
    MaxConnectionsError,
    MovedError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from rsched._core.errors import (
    AccessDenied,
    ConfigError,
    PoolExhausted,
    ReadOnlyServer,
    RedisUnavailable,
    RedisUrlMismatch,
    RschedError,
    ServerError,
    ServerOutOfMemory,
    WrongNode,
)
from rsched._core.log import EventLogger
from rsched._core.settings import Settings, safe_url
from rsched._redis import scripts
from rsched._redis.cluster import NOT_A_CLUSTER, connect_cluster, is_cluster, per_primary
from rsched._redis.durability import Durability

_URL_HINT = "e.g. redis://127.0.0.1:6379/0 or rediss://user:pass@host:6380/0"
#: Re-sends after a refused or dropped connection (each fails fast); never after a timeout.
CONNECT_RETRIES = 2
#: How long one pub/sub read waits for a message before it looks again.
LISTEN_POLL_S = 1.0
#: Silence on a pub/sub connection after which a PING checks that the server still answers.
PUBSUB_PING_S = 30.0
#: What redis-py says when a BlockingConnectionPool had no free connection in time.
_POOL_EMPTY = "No connection available"


def connect(
    target: Settings | str,
    *,
    socket_timeout_s: float | None = None,
    encoding_errors: str = "strict",
) -> Redis:
    """An async client with decoded responses, bounded waits and a bounded pool.

    ``target`` is the settings (``redis_url``, ``socket_timeout_s``, ``max_connections``,
    ``pool_timeout_s``) or a bare URL with the default settings; ``socket_timeout_s`` overrides
    theirs (a probe that must answer sooner). Every script rsched sends is
    safe to run twice, so redis-py's re-send after a dropped connection cannot apply an
    operation twice. (The retry must be redis.asyncio's: the sync one would wrap only the
    creation of each coroutine and never retry anything.) ``encoding_errors="replace"``
    reads values that are not UTF-8 as U+FFFD. With ``settings.cluster`` the client is a
    Redis Cluster client (rsched._redis.cluster), which loads the scripts of lua/ each primary it
    learns of lacks. Raises ConfigError for a bad URL.
    """
    settings = (
        target if isinstance(target, Settings) else Settings.model_construct(redis_url=target)
    )
    url = settings.url
    timeout_s = settings.socket_timeout_s if socket_timeout_s is None else socket_timeout_s
    try:
        if settings.cluster:
            return connect_cluster(
                url,
                timeout_s=timeout_s,
                max_connections=settings.max_connections,
                retries=CONNECT_RETRIES,
                scripts=[scripts.source(name) for name in scripts.names()],
                encoding_errors=encoding_errors,
                **_tls_options(settings, url),
            )
        pool = BlockingConnectionPool.from_url(
            url,
            **_tls_options(settings, url),
            decode_responses=True,
            max_connections=settings.max_connections,
            timeout=settings.pool_timeout_s,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            encoding_errors=encoding_errors,
            retry=Retry(
                ExponentialBackoff(cap=0.5, base=0.05),
                retries=CONNECT_RETRIES,
                supported_errors=(RedisConnectionError,),
            ),
            # Without this redis-py adds nothing; with TimeoutError here every hung read would
            # be waited out CONNECT_RETRIES + 1 times.
            retry_on_error=[],
            # No health_check_interval: a stale connection fails fast and is retried anyway, and
            # redis-py 5.3 reconnects forever on a refused AUTH when the health check is on.
        )
    except (ValueError, RedisClusterException) as exc:
        raise ConfigError(f"redis_url {safe_url(url)!r} is invalid ({exc}); {_URL_HINT}") from None
    return Redis.from_pool(pool)


def _tls_options(settings: Settings, url: str) -> dict[str, Any]:
    """redis-py's TLS arguments for the TLS settings; parameters in the URL's query (e.g.
    ``?ssl_ca_certs=``) take precedence, as redis-py applies them last."""
    files = {
        "ssl_ca_certs": settings.tls_ca_file,
        "ssl_certfile": settings.tls_cert_file,
        "ssl_keyfile": settings.tls_key_file,
    }
    given: dict[str, Any] = {name: str(p) for name, p in files.items() if p is not None}
    parts = urlsplit(url)
    if parts.scheme != "rediss":
        if given:
            raise ConfigError(
                f"RSCHED_TLS_* files are set but redis_url {safe_url(url)!r} does not use TLS: "
                "write rediss:// in RSCHED_REDIS_URL (or unset the RSCHED_TLS_* settings)"
            )
        return given
    if "ssl_cert_reqs=none" not in parts.query.lower():
        # redis-py before 6.0 verifies the certificate but not that it names the host.
        given["ssl_check_hostname"] = True
    return given


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes / contexts (redis-py wraps socket and TLS errors)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _db_index(url: str) -> str:
    path = urlsplit(url).path.strip("/")
    return path or "0"


def translate(exc: BaseException, settings: Settings) -> RschedError:
    """The RschedError that says, in one line naming the fix, what a Redis failure means.

    ``exc`` is a redis-py error or an OSError; passwords never appear in the message.
    """
    url = safe_url(settings.url)
    scheme = urlsplit(settings.url).scheme
    text = " ".join(str(exc).split())  # one line, whatever the server sent
    # A message of redis-py may repeat the URL it was given; never show a password.
    password = urlsplit(settings.url).password
    if password:
        text = text.replace(password, "***")
    chain = _chain(exc)

    if isinstance(exc, RschedError):
        return exc
    verify = next((e for e in chain if isinstance(e, ssl.SSLCertVerificationError)), None)
    if verify is not None or "CERTIFICATE_VERIFY_FAILED" in text:
        return RedisUrlMismatch(_verify_message(url, verify, text))
    if any(isinstance(e, ssl.SSLError) for e in chain) or "SSL" in text:
        if scheme == "rediss":
            return RedisUrlMismatch(
                f"TLS handshake with {url} failed ({text}): if that server does not use TLS, "
                "write redis:// instead of rediss:// in RSCHED_REDIS_URL; otherwise check its "
                "certificate"
            )
        return RedisUrlMismatch(f"TLS error with {url} ({text}); check RSCHED_REDIS_URL")
    if "without any password configured" in text or "no password is set" in text:
        return AccessDenied(
            f"{url} has no password set but RSCHED_REDIS_URL gives one: remove it from the URL "
            "(or set the server's requirepass)"
        )
    if isinstance(exc, AuthenticationError) or text.startswith(("NOAUTH", "WRONGPASS")):
        return AccessDenied(_auth_message(url, text, has_password=password is not None))
    if isinstance(exc, NoPermissionError) or text.startswith("NOPERM"):
        return AccessDenied(
            "the Redis user of RSCHED_REDIS_URL may not do what rsched needs here (NOPERM: "
            f"{text.removeprefix('NOPERM').strip()}): "
            "use the user of the role that may (scheduler, worker, client, read-only), or grant "
            "it with ACL SETUSER as docs/security.md gives for that role"
        )
    if "Invalid Database" in text or "DB index is out of range" in text:
        return RedisUrlMismatch(
            f"{url} has no database {_db_index(settings.url)} (DB index is out of range): use "
            "a database the server has in RSCHED_REDIS_URL, e.g. /0 (it has `databases` of them)"
        )
    if isinstance(exc, InvalidResponse) or "Protocol Error" in text:
        return RedisUrlMismatch(
            f"the service at {url} does not speak the Redis protocol ({text[:80]}): check the "
            "host and port of RSCHED_REDIS_URL"
        )
    if isinstance(exc, ReadOnlyError) or text.startswith("READONLY"):
        return ReadOnlyServer(
            f"{url} is a read-only replica ({text[:60]}): point RSCHED_REDIS_URL at its primary"
        )
    if isinstance(exc, OutOfMemoryError) or text.startswith("OOM"):
        return ServerOutOfMemory(
            f"Redis at {url} is out of memory (maxmemory reached, writes refused): raise its "
            "maxmemory, free memory (e.g. purge dead letters, lower history_limit) or add RAM"
        )
    if isinstance(exc, MovedError | AskError) or text.startswith(("MOVED ", "ASK ")):
        node = text.split()[-1]
        return WrongNode(
            f"{url} is a Redis Cluster node that does not hold the keys of prefix "
            f"{settings.prefix!r} (MOVED to {node}): run rsched in cluster mode (--cluster or "
            f"RSCHED_CLUSTER=true), or point RSCHED_REDIS_URL at redis://{node}/0"
        )
    if NOT_A_CLUSTER in text:
        return RedisUrlMismatch(
            f"{url} is not a Redis Cluster node (cluster mode is off there): drop --cluster / "
            "RSCHED_CLUSTER, or point RSCHED_REDIS_URL at a node of the cluster"
        )
    if "max number of clients reached" in text:
        return RedisUnavailable(
            f"Redis at {url} refused the connection: it has reached its maxclients; raise "
            "maxclients on the server, or lower RSCHED_MAX_CONNECTIONS or the number of processes"
        )
    if isinstance(exc, MaxConnectionsError):  # a cluster node's connections: no waiting there
        return PoolExhausted(
            f"all {settings.max_connections} connections to a node of the cluster at {url} "
            "were busy: raise RSCHED_MAX_CONNECTIONS, or make fewer calls at once"
        )
    if _POOL_EMPTY in text:
        return PoolExhausted(
            f"all {settings.max_connections} connections to {url} stayed busy for "
            f"{settings.pool_timeout_s:g} s: raise RSCHED_MAX_CONNECTIONS or "
            "RSCHED_POOL_TIMEOUT_S, or make fewer calls at once"
        )
    if isinstance(exc, RedisTimeoutError | TimeoutError) and not isinstance(exc, ResponseError):
        return RedisUnavailable(
            f"Redis at {url} did not answer within {settings.socket_timeout_s:g} s ({text}): "
            "check that the server is running and not paused or overloaded, or raise "
            "RSCHED_SOCKET_TIMEOUT_S"
        )
    if isinstance(exc, RedisConnectionError | ConnectionError | OSError):
        return RedisUnavailable(
            f"cannot reach Redis at {url} ({text}); check RSCHED_REDIS_URL / --redis-url and "
            "that the server is running"
        )
    return ServerError(f"Redis at {url} refused a command ({text[:200]})")


def _verify_message(url: str, exc: ssl.SSLCertVerificationError | None, text: str) -> str:
    reason = " ".join(str(exc.verify_message if exc is not None else text).split())
    if "mismatch" in reason.lower() or "not valid for" in reason.lower():
        return (
            f"the TLS certificate of {url} does not name that host ({reason}): connect by a "
            "host name or address the certificate lists (its subjectAltName) in RSCHED_REDIS_URL"
        )
    return (
        f"the TLS certificate of {url} could not be verified ({reason}): give the CA "
        "certificate that signed it in RSCHED_TLS_CA_FILE (or ?ssl_ca_certs=/path/ca.pem in "
        "RSCHED_REDIS_URL)"
    )


def _auth_message(url: str, text: str, *, has_password: bool) -> str:
    if not has_password:
        return (
            f"{url} requires a password (NOAUTH): put it in RSCHED_REDIS_URL, e.g. "
            "redis://:PASSWORD@host:6379/0 or redis://USER:PASSWORD@host:6379/0"
        )
    return (
        f"{url} refused the user or password of RSCHED_REDIS_URL ({text[:60]}): check both "
        "(redis://USER:PASSWORD@host:6379/0)"
    )


#: First bytes of a reply in the Redis protocol (RESP2 and RESP3).
_RESP_TYPES = b"+-:$*_,#!=(%~>|"
_PLAIN_PING = b"PING\r\n"


async def explain(exc: BaseException, settings: Settings) -> RschedError:
    """:func:`translate`, and when that can only say "cannot reach" although something
    listens, a look at what listens there: a TLS-only server (for redis://), a plain server
    (for rediss://) or a service that is not Redis. Each look takes at most 1 s."""
    error = translate(exc, settings)
    parts = urlsplit(settings.url)
    if not isinstance(error, RedisUnavailable) or parts.scheme not in ("redis", "rediss"):
        return error
    if "refused" in str(error) or "Error 111" in str(error):
        return error  # nothing listens: nothing to look at
    timed_out = isinstance(exc, RedisTimeoutError | TimeoutError)
    if timed_out and parts.scheme == "redis":
        return error  # a hung server; a TLS-only one would have closed the connection
    host, port = parts.hostname or "localhost", parts.port or 6379
    look_s = min(1.0, settings.socket_timeout_s)
    url = safe_url(settings.url)
    tls = False
    if parts.scheme == "redis":
        with anyio.move_on_after(look_s):
            tls = await _speaks_tls(host, port)
    if tls:
        return RedisUrlMismatch(
            f"{url} accepts TLS connections only: write rediss:// instead of redis:// in "
            "RSCHED_REDIS_URL"
        )
    reply = b""
    with anyio.move_on_after(look_s):
        reply = await _first_bytes(host, port)
    if reply and reply[:1] in _RESP_TYPES and parts.scheme == "rediss":
        return RedisUrlMismatch(
            f"{url} does not use TLS (it answers in plain text): write redis:// instead of "
            "rediss:// in RSCHED_REDIS_URL"
        )
    if reply and reply[:1] not in _RESP_TYPES:
        return RedisUrlMismatch(
            f"the service at {url} does not speak the Redis protocol (it answered "
            f"{reply[:24]!r}): check the host and port of RSCHED_REDIS_URL"
        )
    return error


async def _first_bytes(host: str, port: int) -> bytes:
    """What a plain-text PING gets back first (b"" for nothing or a close)."""
    try:
        async with await anyio.connect_tcp(host, port) as stream:
            await stream.send(_PLAIN_PING)
            return await stream.receive(64)
    except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
        return b""


async def _speaks_tls(host: str, port: int) -> bool:
    """Whether a TLS handshake gets a TLS answer (any certificate: only the protocol counts)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        stream = await anyio.connect_tcp(host, port, tls=True, ssl_context=context)
    except ssl.SSLError as exc:
        # An alert from the server is TLS too (a client certificate it wants, ...).
        return bool(exc.reason) and "ALERT" in str(exc.reason)
    except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
        return False
    await anyio.aclose_forcefully(stream)  # no TLS goodbye: only the handshake mattered
    return True


#: Failures translate() turns into something worth stopping for at start-up: waiting cannot fix
#: a wrong URL, password or server; it can fix a server that is down or full.
PERMANENT = (AccessDenied, ReadOnlyServer, WrongNode, RedisUrlMismatch)


async def check_server(redis: Redis, settings: Settings, key: str) -> None:
    """Fail early, in one line, when the server can never serve rsched as configured.

    Reads ``key`` (one of the prefix's keys: a cluster node that does not hold the prefix
    answers MOVED) and asks the server's role (a replica cannot take writes). Raises the
    :data:`PERMANENT` errors of :func:`translate`; a server that is down, slow or out of memory
    is left to the callers' retries.
    """
    durability = Durability.from_settings(settings)
    try:
        await redis.exists(key)
        # A cluster client sends writes to the primaries it learned: no role to check.
        role = "" if is_cluster(redis) else await _role(redis)
        if durability is not None:  # replicated_fsync on a server without WAITAOF: refused
            await durability.ready(redis)
    except (RedisError, OSError) as exc:
        error = await explain(exc, settings)
        if isinstance(error, PERMANENT):
            raise error from None
        return
    if role not in ("", "master"):
        raise ReadOnlyServer(
            f"{safe_url(settings.url)} is a replica (role {role}), which cannot take writes: "
            "point RSCHED_REDIS_URL at its primary"
        )


async def _role(redis: Redis) -> str:
    try:
        reply = await redis.role()
    except ResponseError:  # ROLE may be renamed or denied by an ACL: no opinion then
        return ""
    return str(reply[0]) if reply else ""


async def messages(
    pubsub: PubSub, *, ping_after_s: float | None = None
) -> AsyncIterator[dict[str, Any]]:
    """The messages of a subscribed ``pubsub``, until its connection fails.

    ``pubsub.listen()`` of redis-py before 8.1 reads under the socket timeout, so a channel
    silent for ``socket_timeout_s`` raised TimeoutError (and the listener lost messages while
    it subscribed again); short reads that may find nothing behave the same on every version.
    After ``ping_after_s`` (default :data:`PUBSUB_PING_S`) of silence a PING checks that the
    server is still there: any reply is an answer, whatever its shape (``["pong", ""]`` on
    RESP2, ``"PONG"`` on RESP3, which redis-py's ``get_message`` drops); with none within the
    socket timeout this raises redis' TimeoutError, so the caller reconnects instead of waiting
    forever on a dead connection.

    redis-py reconnects a dropped pub/sub connection and subscribes again by itself: what was
    published in between is lost. That is yielded too, as the repeated confirmation (type
    ``subscribe``), so that a listener can make up for what it may have missed.
    """
    quiet_s = PUBSUB_PING_S if ping_after_s is None else ping_after_s
    answer_s = pubsub.connection_pool.connection_kwargs.get("socket_timeout") or 5.0
    heard = anyio.current_time()
    pinged: float | None = None
    confirmed: set[str] = set()
    while True:
        # What get_message reads, before it hands the reply to handle_message.
        reply = await pubsub.parse_response(block=False, timeout=LISTEN_POLL_S)
        now = anyio.current_time()
        if reply is not None:
            heard, pinged = now, None
            kind = _reply_kind(reply)
            if kind == "subscribe":
                channel = _text(reply[1])
                if channel in confirmed:
                    yield {"type": kind, "pattern": None, "channel": channel, "data": reply[2]}
                confirmed.add(channel)
            elif kind != "pong":
                message = await pubsub.handle_message(reply)  # type: ignore[no-untyped-call]
                if message is not None:
                    yield message
        elif pinged is not None and now - pinged > answer_s:
            raise RedisTimeoutError(f"no answer to PING on pub/sub within {answer_s:g} s")
        elif pinged is None and now - heard >= quiet_s:
            await pubsub.ping()
            pinged = now


def _reply_kind(reply: Any) -> str:
    """What a reply read on a subscribed connection is: ``pong`` (a PING's answer: a list
    ``["pong", data]`` on RESP2; on RESP3, where everything else is pushed as a list, a plain
    string), or the type a list names (``message``, ``subscribe``, ...)."""
    if not isinstance(reply, list):
        return "pong"
    return _text(reply[0]).lower() if reply else ""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def warn_if_unsafe(redis: Redis, log: EventLogger) -> list[str]:
    """Log (and return) warnings when the server's settings can lose rsched's data.

    rsched keeps all state in Redis: with no persistence a restart forgets every schedule, and
    an eviction policy other than noeviction silently deletes keys under memory pressure.
    """
    warnings: list[str] = []
    try:
        # INFO rather than CONFIG GET: the users of docs/security.md may run INFO, never CONFIG.
        if is_cluster(redis):  # each primary answers for itself
            infos = await per_primary(redis, "INFO", "persistence", "memory")
        else:
            infos = [await redis.info("persistence", "memory")]
    except RedisError as exc:  # INFO may be renamed or denied on managed services
        log.info("server.check_skipped", reason=str(exc))
        return warnings
    if any(not int(info.get("aof_enabled", 0)) for info in infos):
        warnings.append(
            "appendonly is off: a server restart loses schedules and jobs written since the "
            "last snapshot (set appendonly yes)"
        )
    policies = {str(info.get("maxmemory_policy", "")) for info in infos} - {"", "noeviction"}
    for policy in sorted(policies):
        warnings.append(
            f"maxmemory-policy is {policy}: under memory pressure the server deletes rsched's "
            "keys (set maxmemory-policy noeviction)"
        )
    for text in warnings:
        log.warning("server.unsafe", detail=text)
    return warnings
