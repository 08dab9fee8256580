"""Tests that need no Redis at all: pure time arithmetic, models, rules, codes, the layout."""
