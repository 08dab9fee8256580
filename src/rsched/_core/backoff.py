"""Exponential backoff with jitter for reconnect loops: never busy-loop, never wait too long."""

from __future__ import annotations

import random


class Backoff:
    """``next()`` yields 0.1 s, 0.2 s, 0.4 s … capped at ``maximum``, each ±20 %; ``reset()``."""

    def __init__(self, initial_s: float = 0.1, maximum_s: float = 5.0) -> None:
        self._initial = initial_s
        self._maximum = maximum_s
        self._current = initial_s

    def next(self) -> float:
        delay = self._current * random.uniform(0.8, 1.2)
        self._current = min(self._current * 2, self._maximum)
        return delay

    def reset(self) -> None:
        self._current = self._initial
