"""The Scheduler in process against real servers: firing, misfires, pending runs, retention."""
