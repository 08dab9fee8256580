"""The stores and their Lua scripts against real servers: each key family, each script."""
