"""The test suite: one folder per layer of the package, shared helpers in support/."""
