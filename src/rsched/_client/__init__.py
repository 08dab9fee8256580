"""The SDK behind ``rsched.Client`` and ``rsched.SyncClient``, and schedules files.

Imports ``_core``, ``_redis``, ``_store`` and ``_ops``; never ``_scheduler`` or ``_worker``.
"""
