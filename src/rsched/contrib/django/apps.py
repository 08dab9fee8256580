"""The Django app of rsched.contrib.django: its management command ``rsched_worker``."""

from __future__ import annotations

from django.apps import AppConfig


class RschedConfig(AppConfig):  # type: ignore[misc]  # Django ships no annotations
    name = "rsched.contrib.django"
    label = "rsched"
    verbose_name = "rsched"
