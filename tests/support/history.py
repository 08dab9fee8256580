"""History records as stored: numbers in the base 62 that compact records use."""

from __future__ import annotations

DIGITS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def from_b62(text: str) -> int:
    return sum(DIGITS.index(c) * 62**i for i, c in enumerate(reversed(text)))


def int_b62(n: int) -> str:
    out = ""
    while n:
        n, d = divmod(n, 62)
        out = DIGITS[d] + out
    return out or "0"
