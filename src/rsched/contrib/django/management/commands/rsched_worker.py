"""``python manage.py rsched_worker [rsched-worker flags]``: the worker of this project.

It becomes ``rsched-worker --django <this settings module>`` (the same process, replaced), so
signals, exit statuses and flags are that command's: ``--queues``, ``--concurrency``,
``--metrics-port``, ... (docs/cli.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no annotations
    help = "Run the rsched worker of this project's tasks (rsched-worker --django SETTINGS)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "args", nargs=argparse.REMAINDER, help="flags of rsched-worker (--queues, ...)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        module = settings.SETTINGS_MODULE
        command = [sys.executable, "-m", "rsched._cli.worker_process", "--django", module]
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [*command, *args])
