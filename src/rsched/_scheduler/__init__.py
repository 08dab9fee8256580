"""The scheduler process's actors: leases, the tick that fires due schedules, membership,
retention and the health watch.

Imports ``_core``, ``_redis``, ``_store`` and ``_ops``; never ``_worker`` or ``_client``.
"""
