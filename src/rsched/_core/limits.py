"""Flow-control limits: ``Limit`` as users declare it, the keys it fills from a payload, and
the form a job carries (docs/limits.md).

A limit names a key (a template such as ``customer:{customer_id}``, filled from the job's
payload) and caps, across every worker of the deployment, how many jobs holding that key run at
once (``concurrency``) and how many start in any sliding window of a period (``rate``). The
numbers are enforced by the worker's scripts (lua/limit_acquire.lua and the scripts that end a run);
this module only checks and encodes them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

import orjson

from rsched._core.errors import InvalidArgument, InvalidJob
from rsched._core.rules import parse_duration_s
from rsched._core.words import words

#: Longest key, template or filled.
KEY_MAX = 200
#: Most starts a rate may allow in its period (each start is kept for the period).
RATE_COUNT_MAX = 100_000
#: Shortest and longest rate period, in seconds.
RATE_PERIOD_MIN_S = 0.01
RATE_PERIOD_MAX_S = 7 * 86400
#: Largest concurrency (0, set by an operator, pauses a key).
CONCURRENCY_MAX = 1_000_000
#: Most limits one job may hold.
LIMITS_MAX = 8

_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
# Characters a key may not hold: control characters (the scripts separate fields with NUL),
# and braces and '*' outside a template's fields ('*' makes a pattern, only for overrides).
_BAD_KEY_CHAR = re.compile(r"[\x00-\x1f\x7f{}*]")


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` starts in any window of ``period_s`` seconds."""

    count: int
    period_s: float

    @property
    def period_ms(self) -> int:
        return max(1, round(self.period_s * 1000))

    def __str__(self) -> str:
        for unit, seconds in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
            if self.period_s == seconds:
                return f"{self.count}/{unit}"
        return f"{self.count}/{self.period_s:g}s"


def parse_rate(value: object) -> Rate:
    """A rate from ``"100/m"`` (units s, m, h, d), ``"10/30s"`` (any duration after the slash)
    or ``(count, period)`` (period in seconds, as text or as a timedelta). Raises ValueError
    saying what to give."""
    if isinstance(value, Rate):
        count, period = value.count, value.period_s
    elif isinstance(value, str):
        head, sep, tail = value.strip().partition("/")
        refused = f"{value!r} is not a rate; give it as count/period: 10/s, 100/m, 5000/h, 10/30s"
        if not sep or not head.strip().isdigit():
            raise ValueError(refused)
        count = int(head)
        unit = tail.strip()
        try:
            period = _UNITS[unit] if unit in _UNITS else parse_duration_s(unit)
        except ValueError:
            raise ValueError(refused) from None
    elif isinstance(value, tuple | list) and len(value) == 2:
        count_raw, period_raw = value
        if isinstance(count_raw, bool) or not isinstance(count_raw, int):
            raise ValueError(f"the count of a rate is a whole number, got {count_raw!r}")
        count = count_raw
        if isinstance(period_raw, timedelta | str | int | float):
            period = parse_duration_s(period_raw)
        else:
            raise ValueError(f"the period of a rate is a duration, got {period_raw!r}")
    else:
        raise ValueError(f"{value!r} is not a rate; give '100/m' or (count, period_s)")
    if not 1 <= count <= RATE_COUNT_MAX:
        raise ValueError(f"a rate allows 1 to {RATE_COUNT_MAX:,} starts a period, got {count}")
    if not RATE_PERIOD_MIN_S <= period <= RATE_PERIOD_MAX_S:
        raise ValueError(f"a rate's period is 10ms to 7d, got {period:g} s")
    return Rate(count, period)


def check_concurrency(value: object, *, allow_zero: bool = False) -> int:
    """A concurrency: a whole number from 1 (0 too for an operator's override: the key is
    paused). Raises ValueError."""
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= CONCURRENCY_MAX:
        raise ValueError(
            f"concurrency is a whole number from {low} to {CONCURRENCY_MAX:,}, got {value!r}"
        )
    return value


def check_key(key: object, *, pattern: bool = False) -> str:
    """A filled key (``pattern``: a key where '*' matches any text, for overrides). Raises
    ValueError."""
    if not isinstance(key, str) or not key or len(key) > KEY_MAX:
        raise ValueError(f"a limit key is text of 1 to {KEY_MAX} characters, got {key!r}")
    bad = _BAD_KEY_CHAR.search(key.replace("*", "") if pattern else key)
    if bad:
        raise ValueError(
            f"limit key {key!r} holds {bad.group()!r}; a key holds no control characters, "
            "braces or '*'"
        )
    return key


class Limit:
    """A limit a job must hold to start: ``Limit("customer:{customer_id}", concurrency=1)``,
    ``Limit("crm", rate="100/m")``.

    ``key`` is a template filled from the job's payload (``{name}`` is the payload's field
    ``name``, a string or a whole number). ``concurrency`` caps the jobs holding the filled key
    at once across every worker process; ``rate`` ("10/s", "100/m", "5000/h", "10/30s" or
    ``(count, period)``) caps how many start in any sliding window of the period. Give one or
    both. Raises InvalidArgument naming ``key``, ``concurrency`` or ``rate``.
    """

    __slots__ = ("_parts", "concurrency", "fields", "key", "rate")

    key: str
    concurrency: int | None
    rate: Rate | None
    fields: tuple[str, ...]
    _parts: tuple[str, ...]

    def __init__(
        self,
        key: str,
        concurrency: int | None = None,
        rate: str | tuple[int, Any] | Rate | None = None,
    ) -> None:
        if not isinstance(key, str) or not key or len(key) > KEY_MAX:
            raise InvalidArgument(
                "key", f"a limit key is text of 1 to {KEY_MAX} characters, got {key!r}"
            )
        literal = _FIELD.sub("", key)
        bad = _BAD_KEY_CHAR.search(literal)
        if bad:
            raise InvalidArgument(
                "key",
                f"limit key {key!r} holds {bad.group()!r} outside a {{field}}; a template's "
                "fields are {name} (a payload field), and keys hold no control characters or '*'",
            )
        if concurrency is None and rate is None:
            raise InvalidArgument(
                "concurrency",
                f"limit {key!r} caps nothing; give concurrency=N, rate='100/m' or both",
            )
        try:
            conc = None if concurrency is None else check_concurrency(concurrency)
        except ValueError as exc:
            raise InvalidArgument("concurrency", str(exc)) from None
        try:
            parsed = None if rate is None else parse_rate(rate)
        except ValueError as exc:
            raise InvalidArgument("rate", str(exc)) from None
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "concurrency", conc)
        object.__setattr__(self, "rate", parsed)
        object.__setattr__(self, "fields", tuple(_FIELD.findall(key)))
        # The template split at its fields: literal, field, literal, field, …, literal.
        object.__setattr__(self, "_parts", tuple(_FIELD.split(key)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Limit is immutable")

    def __repr__(self) -> str:
        parts = [repr(self.key)]
        if self.concurrency is not None:
            parts.append(f"concurrency={self.concurrency}")
        if self.rate is not None:
            parts.append(f"rate={str(self.rate)!r}")
        return f"Limit({', '.join(parts)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Limit):
            return NotImplemented
        return (self.key, self.concurrency, self.rate) == (other.key, other.concurrency, other.rate)

    def __hash__(self) -> int:
        return hash((self.key, self.concurrency, self.rate))

    def fill(self, payload: Mapping[str, Any]) -> str:
        """The key for one job's payload. Raises ValueError naming the missing or unusable
        payload field."""
        if not self.fields:
            return self.key
        parts = list(self._parts)
        for i in range(1, len(parts), 2):  # the fields (odd places of the split)
            name = parts[i]
            try:
                v = payload[name]
            except KeyError:
                raise ValueError(
                    f"limit key {self.key!r} needs the payload field {name!r}, which this job's "
                    "payload lacks; add it to the payload or change the key"
                ) from None
            if isinstance(v, str):
                if _BAD_KEY_CHAR.search(v):
                    raise ValueError(
                        f"limit key {self.key!r}: payload field {name!r} holds {v!r}; a key "
                        "holds no control characters, braces or '*'"
                    )
                parts[i] = v
            elif isinstance(v, int) and not isinstance(v, bool):
                parts[i] = str(v)
            else:
                raise ValueError(
                    f"limit key {self.key!r}: payload field {name!r} is {type(v).__name__}; "
                    "a key is filled from text or a whole number"
                )
        filled = "".join(parts)
        if len(filled) > KEY_MAX:
            raise ValueError(f"limit key {filled[:40]!r}… is longer than {KEY_MAX} characters")
        return filled

    def to_dict(self) -> dict[str, Any]:
        """As JSON for the API and schedules files: key, concurrency, rate (text)."""
        return {
            "key": self.key,
            "concurrency": self.concurrency,
            "rate": None if self.rate is None else str(self.rate),
        }


class JobLimit(NamedTuple):
    """A limit as one job holds it: the filled key, the template it came from (the metrics'
    label), and the declared numbers (0 = no cap of that kind)."""

    key: str
    template: str
    concurrency: int | None
    rate_count: int
    rate_ms: int

    def wire(self) -> list[Any]:
        return [self.template, self.key, self.concurrency, self.rate_count, self.rate_ms]


def coerce_limits(value: object) -> tuple[Limit, ...]:
    """``limits=`` as given to a task, a schedule or enqueue: Limits, or dicts with key,
    concurrency and rate (schedules files, the API). Raises InvalidArgument naming the limit."""
    if value is None:
        return ()
    if (
        isinstance(value, Limit | Mapping)
        or not isinstance(value, Iterable)
        or isinstance(value, str)
    ):
        raise InvalidArgument(
            "limits", f"give a list of limits, e.g. {words().limits}; got {value!r}"
        )
    out: list[Limit] = []
    for i, item in enumerate(value):
        if isinstance(item, Limit):
            out.append(item)
        elif isinstance(item, Mapping):
            unknown = set(item) - {"key", "concurrency", "rate"}
            if unknown:
                raise InvalidArgument(
                    f"limits[{i}]",
                    f"unknown field(s) {sorted(unknown)}; a limit has key, concurrency, rate",
                )
            try:
                out.append(Limit(item.get("key"), item.get("concurrency"), item.get("rate")))  # type: ignore[arg-type]
            except InvalidArgument as exc:
                raise InvalidArgument(f"limits[{i}].{exc.field}", exc.message) from None
        else:
            raise InvalidArgument(
                f"limits[{i}]", f"give each limit as in {words().limits}; got {item!r}"
            )
    if len(out) > LIMITS_MAX:
        raise InvalidArgument("limits", f"a job holds at most {LIMITS_MAX} limits, got {len(out)}")
    return tuple(out)


def fill_all(limits: Sequence[Limit], payload: Mapping[str, Any]) -> list[JobLimit]:
    """The keys one job holds, filled from its payload. Raises ValueError naming the field."""
    return [
        JobLimit(
            lim.fill(payload),
            lim.key,
            lim.concurrency,
            lim.rate.count if lim.rate else 0,
            lim.rate.period_ms if lim.rate else 0,
        )
        for lim in limits
    ]


def merge(*groups: Sequence[JobLimit]) -> tuple[JobLimit, ...]:
    """The limits of one job, one per key in first-seen order: a key declared twice (by the
    task and by enqueue, say) keeps the stricter of each number."""
    flat = [h for group in groups for h in group]
    if len({h.key for h in flat}) == len(flat):
        return tuple(flat)
    by_key: dict[str, JobLimit] = {}
    for held in (h for group in groups for h in group):
        old = by_key.get(held.key)
        if old is None:
            by_key[held.key] = held
            continue
        conc = [c for c in (old.concurrency, held.concurrency) if c is not None]
        # The stricter rate is the one with the longer interval between starts.
        rate = max(
            ((h.rate_count, h.rate_ms) for h in (old, held) if h.rate_count),
            key=lambda r: r[1] / r[0],
            default=(0, 0),
        )
        by_key[held.key] = JobLimit(old.key, old.template, min(conc) if conc else None, *rate)
    return tuple(by_key.values())


def decode(raw: object) -> list[JobLimit]:
    """Read the limits a job carries (its opts' ``limits``: [[template, key, concurrency, count,
    ms], …]); raises ValueError on a field written by someone else."""
    if not isinstance(raw, list):
        raise ValueError("opts.limits is not a JSON list")
    out = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 5):
            raise ValueError(
                f"opts.limits holds {item!r}, not [template, key, concurrency, count, ms]"
            )
        template, key, conc, count, ms = item
        if not isinstance(template, str) or not isinstance(key, str):
            raise ValueError(f"opts.limits holds {item!r}: template and key are text")
        check_key(key)
        if conc is not None:
            check_concurrency(conc)
        if not (isinstance(count, int) and isinstance(ms, int) and count >= 0 and ms >= 0):
            raise ValueError(f"opts.limits holds {item!r}: the rate is two whole numbers")
        if conc is None and not count:
            raise ValueError(f"opts.limits holds {item!r}, which caps nothing")
        out.append(JobLimit(key, template, conc, count, ms))
    return out


def carried(opts: str | None) -> list[JobLimit]:
    """The limits a job carries in its ``opts`` field (given to enqueue or to its schedule)."""
    if not opts or '"limits"' not in opts:
        return []
    try:
        doc = orjson.loads(opts)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"opts is not valid JSON ({exc})") from None
    return decode(doc.get("limits", [])) if isinstance(doc, dict) else []


def with_limits(opts: str, held: Sequence[JobLimit]) -> str:
    """A job's ``opts`` field (JobOptions.encode) with the limits it carries added."""
    if not held:
        return opts
    doc = orjson.loads(opts)
    doc["limits"] = [h.wire() for h in held]
    return orjson.dumps(doc).decode()


class LimitInfo(NamedTuple):
    """One limit key as ``Client.limits`` reads it: the numbers in force (an operator's
    ``set_limit`` over the declared ones), the jobs holding it, the jobs waiting on it, and the
    starts in its current rate window. ``override`` is the operator's numbers when set (a key
    pattern's rows, ``customer:*``, carry only them)."""

    key: str
    template: str
    concurrency: int | None
    rate: Rate | None
    holders: int
    waiting: int
    starts: int
    override: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "template": self.template,
            "concurrency": self.concurrency,
            "rate": None if self.rate is None else str(self.rate),
            "holders": self.holders,
            "waiting": self.waiting,
            "starts": self.starts,
            "override": self.override,
        }


def override_doc(concurrency: int | None, rate: object) -> dict[str, Any]:
    """An operator's numbers as stored (``{"c": n, "r": [count, ms]}``, a number left out keeps
    the declared one). Raises InvalidArgument naming ``concurrency`` or ``rate``."""
    doc: dict[str, Any] = {}
    if concurrency is not None:
        try:
            doc["c"] = check_concurrency(concurrency, allow_zero=True)
        except ValueError as exc:
            raise InvalidArgument("concurrency", str(exc)) from None
    if rate is not None:
        try:
            parsed = parse_rate(rate)
        except ValueError as exc:
            raise InvalidArgument("rate", str(exc)) from None
        doc["r"] = [parsed.count, parsed.period_ms]
    if not doc:
        raise InvalidArgument(
            "concurrency", "give concurrency=N (0 pauses the key), rate='100/m' or both"
        )
    return doc


def limits_of(
    task_limits: Sequence[Limit], payload: Mapping[str, Any], opts: str | None
) -> tuple[JobLimit, ...]:
    """The limits one job holds: its task's, filled from its payload, and those it carries in
    its ``opts`` (given to enqueue or to its schedule). Raises ValueError naming the payload
    field a key needs, or what is wrong with the carried ones."""
    return merge(fill_all(task_limits, payload), carried(opts))


def job_limits(limits: object, payload: Any) -> list[JobLimit]:
    """The limits a job given ``limits`` carries, filled from its payload; raises InvalidJob
    naming ``limits`` (or the field a key needs)."""
    try:
        declared = coerce_limits(limits)
        return fill_all(declared, payload) if declared else []
    except InvalidArgument as exc:
        raise InvalidJob(exc.field, exc.message) from None
    except ValueError as exc:
        raise InvalidJob("limits", str(exc)) from None
