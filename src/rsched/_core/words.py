"""The words a message uses for what a user gives: each surface names its own fields and calls.

The same rule (``_core/rules.py``, ``_core/schedule.py``, ``_core/job.py``) is reached from the
Python SDK (keyword arguments, ``upsert()``), the ``rsched`` command (``--every``, ``rsched
upsert``), the HTTP API (JSON fields, ``PUT /api/v1/schedules/ID``) and schedules files (TOML keys).
A message names a field, an example or what to do instead through the :class:`Words` of the surface
being served (:func:`speaking`), so each surface reads in its own terms while the rule and its
wording stay in one place. The SDK's words are the default; the other surfaces define theirs beside
their code (``_cli/common.py``'s ``CLI_WORDS``, ``_client/schedules_file.py``'s ``FILE_WORDS``,
``web/_api.py``'s ``HTTP_WORDS``). Pure."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Words:
    """One surface's names in messages.

    ``fields`` maps a schedule's field or a job's option (by its SDK name) to what this surface
    calls it, ``job_fields`` the same for ``enqueue`` where it differs, ``arguments`` a read's
    argument (``limit``, ``cursor``); a name missing from them is used as it is. ``setting``
    formats a field set to a value (``{name}`` and ``{value}``); ``one_trigger`` lists the three
    triggers by example; ``durations`` the forms a duration takes; ``exists`` says how to
    replace or change an existing schedule (``{id}``); ``run_now`` how to run a job at once;
    ``unknown_field`` where the fields are listed; ``json_object`` what a payload must be;
    ``limits`` how flow-control limits are given, by example; ``set_calendar`` how an
    exclusion calendar is created (``{name}``).
    """

    fields: Mapping[str, str] = dataclasses.field(default_factory=dict)
    job_fields: Mapping[str, str] = dataclasses.field(default_factory=dict)
    arguments: Mapping[str, str] = dataclasses.field(default_factory=dict)
    setting: str = "{name}={value!r}"
    one_trigger: str = "cron='0 2 * * *', every=300 or at=<datetime>"
    durations: str = "seconds (300), text such as 90s, 5m, 1h30m or 2d, or a timedelta"
    exists: str = "use upsert() to replace it or update() to change fields"
    run_now: str = "use enqueue() to run a job now"
    unknown_field: str = "check the spelling against rsched.Schedule's fields"
    json_object: str = "a JSON object (a dict)"
    limits: str = "limits=[rsched.Limit('crm', rate='100/m')]"
    set_calendar: str = "Client.set_calendar({name!r}, dates=[...])"

    def field(self, name: str) -> str:
        """A schedule's field (or a job option) as this surface names it."""
        return self.fields.get(name, name)

    def job_field(self, name: str) -> str:
        """A field of a job to enqueue as this surface names it."""
        return self.job_fields.get(name, self.field(name))

    def argument(self, name: str) -> str:
        """An argument of a read (``limit``, ``cursor``, ``status``) as this surface names it."""
        return self.arguments.get(name, name)

    def set_to(self, name: str, value: str) -> str:
        """``name`` set to ``value``, written as on this surface."""
        return self.setting.format(name=self.field(name), value=value)


#: The Python SDK's words: keyword arguments and method calls.
PYTHON = Words()

_speaking: ContextVar[Words] = ContextVar("rsched_words", default=PYTHON)


def words() -> Words:
    """The words of the surface being served (the SDK's unless :func:`speaking` says else)."""
    return _speaking.get()


@contextlib.contextmanager
def speaking(surface: Words) -> Iterator[None]:
    """Build every message inside the block in ``surface``'s words."""
    token = _speaking.set(surface)
    try:
        yield
    finally:
        _speaking.reset(token)


def speak(surface: Words) -> None:
    """Build the messages of the rest of this task (an HTTP request) in ``surface``'s words."""
    _speaking.set(surface)
