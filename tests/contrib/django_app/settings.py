"""Settings of the test Django project: no database use, the tasks on rsched. The Redis URL and
key prefix come from RSCHED_REDIS_URL and RSCHED_PREFIX (the tests set them for the worker),
or from the OPTIONS the tests put on top with ``override_settings``."""

from __future__ import annotations

from typing import Any

SECRET_KEY = "rsched-tests"
USE_TZ = True
INSTALLED_APPS = ["tests.contrib.django_app", "rsched.contrib.django"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}

#: Django's queue "default" is rsched's queue "dj"; "urgent" keeps its name.
OPTIONS: dict[str, Any] = {"DEFAULT_QUEUE": "dj", "MAX_RETRIES": 0, "TIMEOUT_S": 30}
QUEUES = ["default", "urgent"]
TASKS = {
    "default": {
        "BACKEND": "rsched.contrib.django.RschedBackend",
        "QUEUES": QUEUES,
        "OPTIONS": OPTIONS,
    }
}

RSCHED_SCHEDULES = [
    {
        "id": "dj-tick",
        "task": "tests.contrib.django_app.tasks.tick",
        "every": 1,
        "kwargs": {"note": "from settings"},
    },
]
