"""The ``rsched`` command and the two process mains (``rsched-scheduler``, ``rsched-worker``).

May import every subpackage below it and the public ``rsched``.
"""
