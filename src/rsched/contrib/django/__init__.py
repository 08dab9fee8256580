"""rsched as the backend of Django's tasks framework: ``rsched.contrib.django`` (docs/django.md).

Django 6's ``django.tasks`` and, on Django 5.2, its backport ``django-tasks``
(``pip install rsched[django]``)::

    # settings.py
    INSTALLED_APPS = [..., "rsched.contrib.django"]   # only for `manage.py rsched_worker`
    TASKS = {
        "default": {
            "BACKEND": "rsched.contrib.django.RschedBackend",
            "OPTIONS": {"REDIS_URL": "redis://localhost:6379/0"},
        }
    }
    RSCHED_SCHEDULES = [
        {"id": "nightly", "task": "billing.tasks.invoice_all", "cron": "0 2 * * *"},
    ]

    # billing/tasks.py
    from django.tasks import task            # django_tasks on Django 5.2

    @task(priority=10)
    def invoice(order_id: int) -> str: ...

Enqueue as usual (``invoice.enqueue(42)``), run ``rsched-worker --django mysite.settings``
(or ``python manage.py rsched_worker``), read results with ``invoice.get_result(id)``.
The ``worker`` attribute of this module is the worker of the project Django is set up with
(built on first use: ``rsched-worker rsched.contrib.django:worker`` is the same command).
"""

from __future__ import annotations

from rsched.contrib.django._backend import RschedBackend
from rsched.contrib.django._worker import DjangoWorker, build_worker

__all__ = ("DjangoWorker", "RschedBackend", "build_worker")

_built: list[DjangoWorker] = []


def __getattr__(name: str) -> DjangoWorker:
    # The worker is built on first use: importing the package (for the backend, in settings)
    # must not set Django up.
    if name != "worker":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _built:
        _built.append(build_worker())
    return _built[0]
