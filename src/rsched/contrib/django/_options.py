"""The OPTIONS of an RschedBackend in Django's ``TASKS`` setting, read and checked once.

```python
TASKS = {
    "default": {
        "BACKEND": "rsched.contrib.django.RschedBackend",
        "QUEUES": ["default", "emails"],        # Django's own: the queue names tasks may use
        "OPTIONS": {
            "REDIS_URL": "redis://localhost:6379/0",   # else RSCHED_REDIS_URL
            "PREFIX": "rsched",                        # else RSCHED_PREFIX
            "SETTINGS": {"worker": {"concurrency": 20}},  # any other rsched setting
            "DEFAULT_QUEUE": "default",  # the rsched queue of Django's queue "default"
            "MAX_RETRIES": 0,            # attempts after a failure (Django has no retries)
            "TIMEOUT_S": 600,            # a run's time limit (rsched's default: an hour)
            "TASK_MODULES": [],          # modules with tasks besides each app's tasks.py
        },
    }
}
```
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from rsched import ConfigError, Settings

_KEYS = frozenset(
    {"REDIS_URL", "PREFIX", "SETTINGS", "DEFAULT_QUEUE", "MAX_RETRIES", "TIMEOUT_S", "TASK_MODULES"}
)


@dataclass(frozen=True, slots=True)
class Options:
    """An RschedBackend's OPTIONS, checked (see the module doc)."""

    settings: Settings
    default_queue: str
    max_retries: int
    timeout_s: float | None
    task_modules: tuple[str, ...]

    @classmethod
    def parse(cls, alias: str, options: Mapping[str, Any]) -> Options:
        """Raises ConfigError naming the option (``TASKS[alias]["OPTIONS"][...]``) and the fix."""
        where = f'TASKS[{alias!r}]["OPTIONS"]'
        if not isinstance(options, Mapping):
            raise ConfigError(f"{where}: give a dict, not {type(options).__name__}")
        unknown = sorted(set(options) - _KEYS)
        if unknown:
            raise ConfigError(
                f"{where}: unknown {', '.join(unknown)}; use {', '.join(sorted(_KEYS))}"
            )
        given = options.get("SETTINGS", {})
        if not isinstance(given, Mapping):
            raise ConfigError(f'{where}["SETTINGS"]: give a dict of rsched settings')
        fields = dict(given)
        typos = sorted(set(fields) - set(Settings.model_fields))
        if typos:
            raise ConfigError(
                f'{where}["SETTINGS"]: no rsched setting {", ".join(map(repr, typos))} '
                "(the settings reference lists them: redis_url, prefix, worker, ...)"
            )
        if options.get("REDIS_URL") is not None:
            fields["redis_url"] = options["REDIS_URL"]
        if options.get("PREFIX") is not None:
            fields["prefix"] = options["PREFIX"]
        try:
            settings = Settings(**fields)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigError(f"{where}: invalid rsched settings: {problems}") from None
        retries = options.get("MAX_RETRIES", 0)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigError(f'{where}["MAX_RETRIES"]: a whole number, 0 or more')
        timeout = options.get("TIMEOUT_S")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise ConfigError(f'{where}["TIMEOUT_S"]: a number of seconds above 0')
        queue = options.get("DEFAULT_QUEUE", "default")
        if not isinstance(queue, str) or not queue:
            raise ConfigError(f'{where}["DEFAULT_QUEUE"]: an rsched queue name')
        modules = options.get("TASK_MODULES", ())
        if isinstance(modules, str) or not all(isinstance(m, str) for m in modules):
            raise ConfigError(f'{where}["TASK_MODULES"]: a list of module names')
        return cls(settings, queue, retries, timeout, tuple(modules))
