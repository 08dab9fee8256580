"""The worker: its actors (reader, runner, acker, upkeep) around one shared state.

Imports ``_core``, ``_redis``, ``_store`` and ``_ops``; never ``_scheduler`` or ``_client``.
"""
