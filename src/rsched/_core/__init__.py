"""The model and rules of rsched, with no I/O: errors and codes, settings, schedules,
cron and time zones, fire plans, jobs, pages, history records, key names, partitions,
metrics definitions and the words of messages.

Imports nothing of rsched's.
"""
