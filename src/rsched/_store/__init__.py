"""One module per family of keys; the only callers of the Lua scripts.

Imports ``_core`` and ``_redis``.
"""
