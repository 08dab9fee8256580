"""A small Django project for the tests of rsched.contrib.django: its settings, and this app's
tasks module (found by the worker as any app's ``tasks.py``)."""
