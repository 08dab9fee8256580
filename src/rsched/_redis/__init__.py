"""Talking to Redis: connections (one server or a cluster), loading and calling the Lua
scripts of ``lua/``, and the durability a write waits for.

Imports ``_core`` only.
"""
