"""The rsched command and the rsched-scheduler / rsched-worker processes."""
