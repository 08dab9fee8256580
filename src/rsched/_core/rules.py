"""The rules user input follows, each in one place: names, payloads, durations, a job's retry and
timeout options, pause notes, page sizes and history statuses.

Schedules (rsched._core.schedule), one-off jobs (QueueStore.enqueue), workers, settings and the
client all check through these functions, so the bounds and the wording are the same everywhere.
Each raises ValueError with the message; the caller wraps it in its own exception (InvalidSchedule,
InvalidJob, InvalidArgument, ConfigError) naming the field."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Literal, get_args

import orjson

from rsched._core.words import words

# Letters, digits and '. _ - :' only: readable in redis-cli, no glob ('*?[') or hash-tag ('{}')
# characters, so a name can never escape its key or its slot.
NAME_MAX_CHARS = 200
NAME_RE = re.compile(rf"^[A-Za-z0-9._:\-]{{1,{NAME_MAX_CHARS}}}$")
PREFIX_RE = re.compile(r"^[A-Za-z0-9._:\-]{1,64}$")

DEFAULT_MAX_PAYLOAD_BYTES = 64 * 1024
#: The largest payload limit a setting may give (RSCHED_MAX_PAYLOAD_BYTES).
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024

MAX_RETRIES_MAX = 1000
RETRY_MULTIPLIER_MAX = 100.0
PAUSE_NOTE_MAX_CHARS = 500
PAGE_MAX = 10_000
BUFFER_LIMIT_DEFAULT = 100
BUFFER_LIMIT_MAX = 100_000
#: The longest ``start_deadline``: a job that may start a year late has no deadline.
START_DEADLINE_MAX_S = 366 * 86_400.0
#: The most consecutive failed runs ``pause_after_failures`` may wait for.
PAUSE_AFTER_FAILURES_MAX = 1000

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: A job option that is a duration (the others are counts and fractions).
SECONDS_OPTIONS = frozenset({"retry_base_s", "retry_max_s", "timeout_s"})

#: Every event a schedule's history records, and so every ``status`` a history read can filter
#: on. Readers keep events of any other name (written by a newer rsched); only the filter is
#: closed, so that a typo is an error instead of an empty answer.
HISTORY_STATUSES = (
    "fired", "skipped", "buffered", "misfired", "released", "cancel_requested", "running",
    "completed", "failed", "timed_out", "retried", "dead", "cancelled", "expired",
)  # fmt: skip
#: A job's priority level: workers take ``high`` first, with a weighted share for the others.
Priority = Literal["high", "normal", "low"]
PRIORITIES: tuple[Priority, ...] = get_args(Priority)
#: What a cron schedule does with a wall time that does not exist (in a spring-forward gap):
#: ``shift`` runs at the first instant after the gap, ``skip`` has no run at that time that day.
#: Unset (None), cron's own rule: ``shift`` for fixed times, ``skip`` for the rest (``*``, steps).
DstGap = Literal["shift", "skip"]
DST_GAPS: tuple[DstGap, ...] = get_args(DstGap)
#: What a cron schedule does with a wall time that happens twice (in a fall-back fold): it runs at
#: the ``first`` occurrence, the ``last`` or ``both``. Unset (None), cron's own rule: ``first``
#: for fixed times, ``both`` for the rest.
DstFold = Literal["first", "last", "both"]
DST_FOLDS: tuple[DstFold, ...] = get_args(DstFold)
#: How long an ``enqueue`` with an ``execution_id`` keeps that id taken after the job finished.
DEFAULT_DEDUP_WINDOW_S = 86_400.0
DEDUP_WINDOW_MAX_S = 366 * 86_400.0
#: The longest ``debounce`` (an enqueue's or a schedule's): a window that stays open longer is a
#: delay, not a debounce, and its key must not live for ever.
DEBOUNCE_MAX_S = 86_400.0
#: The longest ``jitter`` of a schedule: an occurrence's delay is also kept short of the next
#: occurrence, so a longer one would only matter to weekly and rarer schedules.
JITTER_MAX_S = 7 * 86_400.0
#: How many calendars one schedule's ``exclude`` may name (each costs its fires a lookup).
EXCLUDE_MAX = 20


# An execution id as a reader gives it: a schedule's is "<schedule id>@<ms>", an enqueued
# job's a name; never whitespace, and short (it is looked up, never used in a key pattern).
EXECUTION_ID_RE = re.compile(r"^\S{1,300}$")


def check_execution_id(value: object) -> str:
    """An execution id to look a job up by (``rsched job``, ``cancel``)."""
    if not isinstance(value, str) or not EXECUTION_ID_RE.match(value):
        raise ValueError(
            f"{value!r} is not an execution id: give the id a job was fired or enqueued with, "
            "e.g. 'nightly@1715000000000' or 'order-42' (1-300 characters, no spaces)"
        )
    return value


def check_name(value: object, what: str) -> str:
    """A schedule id, task, queue or execution id rsched can put in a key name."""
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise ValueError(
            f"{value!r} is not a valid {what}: use 1-{NAME_MAX_CHARS} letters, digits or "
            "'. _ - :' (no spaces, '*', '?', '[', ']', '{' or '}'), e.g. 'nightly-report'"
        )
    return value


def check_priority(value: object) -> Priority:
    """A job or schedule priority: 'high', 'normal' or 'low'."""
    for level in PRIORITIES:
        if value == level:
            return level
    raise ValueError(f"{value!r} is not a priority: use 'high', 'normal' (the default) or 'low'")


def check_dst_gap(value: object) -> DstGap | None:
    """A cron schedule's ``dst_gap``: 'shift', 'skip', or None (cron's rule)."""
    for rule in DST_GAPS:
        if value == rule:
            return rule
    if value is None:
        return None
    w = words()
    raise ValueError(
        f"{value!r} is not a DST gap rule: use {w.set_to('dst_gap', 'shift')} (a wall time the "
        f"spring-forward gap skips runs at the first instant after it) or "
        f"{w.set_to('dst_gap', 'skip')} (no run at that time that day), or leave it unset for "
        "cron's rule (shift for fixed times, skip for '*' and steps)"
    )


def check_dst_fold(value: object) -> DstFold | None:
    """A cron schedule's ``dst_fold``: 'first', 'last', 'both', or None (cron's rule)."""
    for rule in DST_FOLDS:
        if value == rule:
            return rule
    if value is None:
        return None
    w = words()
    raise ValueError(
        f"{value!r} is not a DST fold rule: use {w.set_to('dst_fold', 'first')}, "
        f"{w.set_to('dst_fold', 'last')} or {w.set_to('dst_fold', 'both')} (a wall time the "
        "fall-back fold repeats runs at its first occurrence, its second, or both), or leave it "
        "unset for cron's rule (first for fixed times, both for '*' and steps)"
    )


def check_dedup_window(value: object) -> float:
    """Seconds an execution id stays taken after its job finished (``dedup_window_s``)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= DEDUP_WINDOW_MAX_S
    ):
        raise ValueError(
            f"must be a number of seconds from 0 to {DEDUP_WINDOW_MAX_S:.0f} (366 days), "
            f"got {value!r}"
        )
    return float(value)


def check_debounce(value: object) -> float:
    """A ``debounce``: how long after the last call of a burst (or the last occurrence of a
    schedule's pile-up) its one job runs; a duration (:func:`parse_duration_s`), more than 0
    and at most a day."""
    seconds = parse_duration_s(value)
    if seconds > DEBOUNCE_MAX_S:
        raise ValueError(f"{seconds:g} s is longer than a day, the longest debounce (1d)")
    if seconds < 0.001:
        raise ValueError(f"{seconds:g} s is shorter than 1ms, the shortest debounce")
    return seconds


def check_start_deadline(value: object) -> float:
    """A ``start_deadline``: how long after its scheduled time a job may still start (not
    started by then, it ends ``expired`` unrun); a duration (:func:`parse_duration_s`) from 1ms
    to 366 days."""
    seconds = parse_duration_s(value)
    shown = value.strip() if isinstance(value, str) else f"{seconds:g} s"
    if seconds < 0.001:
        raise ValueError(f"{shown} is shorter than 1ms, the shortest start deadline")
    if seconds > START_DEADLINE_MAX_S:
        raise ValueError(
            f"{shown} is longer than 366 days, the longest start deadline (366d); leave it out "
            "for none"
        )
    return seconds


def check_jitter(value: object) -> float:
    """A schedule's ``jitter``: each occurrence fires a delay in [0, jitter) after its time,
    derived from the schedule id and the occurrence; a duration from 1ms to 7 days."""
    seconds = parse_duration_s(value)
    shown = value.strip() if isinstance(value, str) else f"{seconds:g} s"
    if seconds < 0.001:
        raise ValueError(f"{shown} is shorter than 1ms, the shortest jitter; leave it out for none")
    if seconds > JITTER_MAX_S:
        raise ValueError(f"{shown} is longer than 7 days, the longest jitter (7d)")
    return seconds


def check_exclude(value: object) -> tuple[str, ...]:
    """A schedule's ``exclude``: the names of the exclusion calendars it skips occurrences of,
    as a list (or, as stored in the hash and given on a command line, comma-separated text);
    at most EXCLUDE_MAX, no repeats."""
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list | tuple):
        raise ValueError(
            f"give a list of calendar names, e.g. ['bank-holidays'], got {type(value).__name__}"
        )
    names = tuple(check_name(name, "calendar name") for name in value)
    if len(names) > EXCLUDE_MAX:
        raise ValueError(f"{len(names)} calendars, over the limit of {EXCLUDE_MAX}")
    if len(set(names)) != len(names):
        raise ValueError(f"a calendar is named twice in {list(names)}; name each once")
    return names


def check_pause_after_failures(value: object) -> int:
    """A schedule's ``pause_after_failures``: the consecutive failed runs (dead-lettered) after
    which it pauses itself; a whole number from 1 to PAUSE_AFTER_FAILURES_MAX."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # as stored in the hash, or given on the command line
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 1 <= value <= PAUSE_AFTER_FAILURES_MAX
    ):
        raise ValueError(
            f"give a whole number from 1 to {PAUSE_AFTER_FAILURES_MAX} (failed runs in a row), "
            f"got {value!r}"
        )
    return value


def check_prefix(prefix: str) -> str:
    """The key prefix of a deployment (RSCHED_PREFIX)."""
    if not PREFIX_RE.match(prefix):
        raise ValueError(
            f"prefix {prefix!r} is invalid: use 1-64 letters, digits or '. _ - :' (e.g. 'rsched')"
        )
    return prefix


def encode_payload(payload: object, limit: float) -> bytes:
    """The payload as the JSON a job carries; it must be a JSON object of at most ``limit``
    bytes encoded."""
    if not isinstance(payload, dict):
        raise ValueError(f"must be {words().json_object}, got {type(payload).__name__}")
    try:
        body = orjson.dumps(payload)
    except TypeError as exc:
        raise ValueError(f"not JSON-serialisable ({exc})") from None
    if len(body) > limit:
        raise ValueError(
            f"payload is {len(body)} bytes encoded, over the {limit}-byte limit; store large "
            "data elsewhere and pass a reference, or raise RSCHED_MAX_PAYLOAD_BYTES"
        )
    return body


def _duration_text(text: str) -> float:
    compact = text.replace(" ", "")
    sign, body = (-1.0, compact[1:]) if compact[:1] == "-" else (1.0, compact.removeprefix("+"))
    if body[:1] not in ("+", "-"):  # one sign at most
        try:
            return sign * float(body)
        except ValueError:
            pass
        parts = _DURATION_PART.findall(body)
        if parts and "".join(n + u for n, u in parts) == body:
            return sign * sum(float(n) * _UNIT_S[u] for n, u in parts)
    raise ValueError(f"{text!r} is not a duration; give {words().durations}")


def parse_duration_s(value: object, *, allow_zero: bool = False) -> float:
    """A duration in seconds from a number of seconds (``300``), text (``"300"``, ``"90s"``,
    ``"5m"``, ``"1h30m"``, ``"1.5d"``, ``"250ms"``) or a timedelta.

    The one reading of durations: schedule fields, job options, schedules files and the CLI all
    come through here. A bool is never a duration; negative, zero (unless ``allow_zero``) and
    infinite ones are refused. Raises ValueError saying what was given and what to give; the
    caller names the field.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str | timedelta):
        raise ValueError(f"{value!r} is not a duration; give {words().durations}")
    if isinstance(value, str):
        shown = value.strip()
        seconds = _duration_text(shown)
    elif isinstance(value, timedelta):
        shown, seconds = str(value), value.total_seconds()
    else:
        seconds = float(value)
        shown = f"{seconds:g}"
    if not math.isfinite(seconds):
        raise ValueError(f"{shown} is not a finite duration; give {words().durations}")
    if seconds < 0:
        raise ValueError(f"{shown} is negative; give a positive duration such as 5m")
    if seconds == 0 and not allow_zero:
        raise ValueError(f"{shown} is zero; give a positive duration such as 5m")
    return seconds


def check_option(name: str, value: object) -> float:
    """One of a job's retry and timeout options (see rsched._core.job.JobOptions); returns it as a
    number (``max_retries`` a whole one). The durations among them also take text ("30s")
    and timedeltas, read by :func:`parse_duration_s`."""
    if name in SECONDS_OPTIONS:
        return parse_duration_s(value)
    if name == "start_deadline":
        return check_start_deadline(value)
    number = math.nan  # refused by every check below
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    # The same words for 5 and 5.0 (a schedule's fields arrive as floats).
    shown = repr(value) if math.isnan(number) else f"{number:g}"
    if name == "max_retries":
        if not (number.is_integer() and 0 <= number <= MAX_RETRIES_MAX):
            raise ValueError(f"must be a whole number from 0 to {MAX_RETRIES_MAX}, got {shown}")
        return int(number)
    if name == "retry_multiplier":
        if not 1 <= number <= RETRY_MULTIPLIER_MAX:
            raise ValueError(
                f"must be a number from 1 to {RETRY_MULTIPLIER_MAX:g} (1 = a fixed delay), "
                f"got {shown}"
            )
    elif name == "retry_jitter":
        if not 0 <= number <= 1:
            raise ValueError(f"must be a fraction from 0 to 1, got {shown}")
    else:
        raise ValueError(f"{name} is not a job option")
    return number


def check_retry_window(retry_base_s: float, retry_max_s: float) -> None:
    if retry_max_s < retry_base_s:
        w = words()
        raise ValueError(f"{w.field('retry_max_s')} must be at least {w.field('retry_base_s')}")


def check_pause_note(note: str) -> str:
    if len(note) > PAUSE_NOTE_MAX_CHARS:
        raise ValueError(f"at most {PAUSE_NOTE_MAX_CHARS} characters")
    return note


def check_history_status(value: object) -> str:
    """A history event name to filter on (one of HISTORY_STATUSES; ``retry``, its older name,
    reads as ``retried``)."""
    if value == "retry":
        return "retried"
    if value not in HISTORY_STATUSES:
        raise ValueError(
            f"{value!r} is not a history status; give one of {', '.join(HISTORY_STATUSES)}"
        )
    return str(value)


#: Every status of a run in the runs log (``Client.runs``), in the order of a run's life.
RUN_STATUSES = (
    "fired", "started", "completed", "failed", "timed_out", "retried", "dead", "cancelled",
    "skipped", "expired",
)  # fmt: skip


def check_run_status(value: object) -> str:
    """A run status to filter the runs log on (one of RUN_STATUSES)."""
    if value not in RUN_STATUSES:
        raise ValueError(f"{value!r} is not a run status; give one of {', '.join(RUN_STATUSES)}")
    return str(value)


def check_page(value: object) -> int:
    """A page size or a count of items to return (``limit``, ``n``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= PAGE_MAX:
        raise ValueError(f"give 1-{PAGE_MAX} (a whole number), got {value!r}")
    return value


def check_buffer_limit(value: object) -> int:
    """A schedule's ``buffer_limit``: how many occurrences ``overlap="buffer_all"`` holds back."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # as stored in the hash, or given on the command line
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= BUFFER_LIMIT_MAX:
        raise ValueError(
            f"give a whole number from 1 to {BUFFER_LIMIT_MAX} (occurrences held back by "
            f"{words().set_to('overlap', 'buffer_all')}), got {value!r}"
        )
    return value


def check_count(value: object) -> int:
    """A limit that may be 0: a whole number ≥ 0 (``max_due``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"give a whole number ≥ 0, got {value!r}")
    return value


ACTOR_MAX_CHARS = 64
ACTOR_RE = re.compile(rf"^[A-Za-z0-9._@:+/\-]{{1,{ACTOR_MAX_CHARS}}}$")


def check_actor(value: object) -> str:
    """Who makes a change, as the audit trail records it (``Client(actor=...)``,
    ``RSCHED_ACTOR``): a user name, ``user@host`` or a service's name."""
    if not isinstance(value, str) or not ACTOR_RE.match(value):
        raise ValueError(
            f"{value!r} is not an actor: use 1-{ACTOR_MAX_CHARS} letters, digits or "
            "'. _ @ : + / -' (no spaces), e.g. 'alice@ops-1' or 'deploy-bot'"
        )
    return value


# Labels (docs/labels.md): short key=value pairs a schedule or a job carries, looked up through
# an index whose key names hold the pair (rsched._core.keys.Keys.label). Neither part can hold
# '=', ',', whitespace, '*?[]' or '{}': the pair is one key name's end, never a glob or another
# hash tag, and "k=v,k=v" (the stored form) reads back unambiguously.
LABEL_KEY_RE = re.compile(r"^[a-z0-9_.\-]{1,40}$")
LABEL_VALUE_RE = re.compile(r"^[A-Za-z0-9_.:@/+\-]{1,64}$")
LABELS_MAX = 16


def check_label(key: object, value: object) -> tuple[str, str]:
    """One label: a key of 1-40 of ``a-z 0-9 _ . -`` and a value of 1-64 of ``A-Z a-z 0-9 _ . :
    @ / + -``."""
    if not isinstance(key, str) or not LABEL_KEY_RE.match(key):
        raise ValueError(
            f"{key!r} is not a label key: use 1-40 lowercase letters, digits or '_ . -', "
            "e.g. team=billing"
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)  # order=42 reads as the text "42"
    if not isinstance(value, str) or not LABEL_VALUE_RE.match(value):
        raise ValueError(
            f"label {key!r}: {value!r} is not a label value: use 1-64 letters, digits or "
            "'_ . : @ / + -' (no spaces, '=' or ','), e.g. 'billing' or 'order-42'"
        )
    return key, value


def check_labels(value: object) -> dict[str, str]:
    """A schedule's or job's ``labels``: a dict of at most LABELS_MAX labels (check_label), or
    their stored text ``"k=v,k=v"`` or a list of ``"k=v"`` (as a command line gives them);
    returned sorted by key."""
    if value is None:
        return {}
    if isinstance(value, str):
        value = [part for part in value.split(",") if part]
    if isinstance(value, list | tuple):
        pairs: dict[str, object] = {}
        for part in value:
            key, sep, val = str(part).partition("=")
            if not sep:
                raise ValueError(f"{part!r} is not a label: write it key=value, e.g. team=billing")
            if key in pairs:
                raise ValueError(f"label {key!r} is given twice; give each key once")
            pairs[key] = val
        value = pairs
    if not isinstance(value, dict):
        raise ValueError(
            f"give labels as a dict of short strings, e.g. {{'team': 'billing'}}, got "
            f"{type(value).__name__}"
        )
    if len(value) > LABELS_MAX:
        raise ValueError(f"{len(value)} labels, over the limit of {LABELS_MAX}")
    return dict(sorted(check_label(k, v) for k, v in value.items()))


def read_labels(text: str | None) -> dict[str, str]:
    """A stored ``labels`` field read back ({} without one, or for one rsched did not write)."""
    if not text:
        return {}
    try:
        return check_labels(text)
    except ValueError:
        return {}


def labels_text(labels: dict[str, str]) -> str:
    """The stored form of checked labels: ``"k=v,k=v"`` sorted by key ('' for none)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def label_pairs(labels: dict[str, str] | str) -> list[str]:
    """The ``k=v`` pairs of checked labels or of their stored text, sorted."""
    if isinstance(labels, str):
        return sorted(part for part in labels.split(",") if part)
    return [f"{k}={v}" for k, v in sorted(labels.items())]
