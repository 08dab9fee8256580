"""rsched.testing: an application's schedules and handlers tested on a virtual clock.

``TestEnv`` holds a client, a worker's handlers and a clock that only the test moves; the
``rsched_env`` pytest fixture (the ``rsched`` pytest plugin, installed with the ``testing``
extra, loaded with ``pytest_plugins``) makes one per test; docs/testing.md. It may import every
layer of rsched, and nothing imports it.
"""

from rsched._store.runs_log import RunRecord
from rsched.testing._env import DEFAULT_START, TestEnv

__all__ = ("DEFAULT_START", "RunRecord", "TestEnv")
