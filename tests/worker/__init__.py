"""The worker in process against real servers: outcomes, one-off jobs, the registry."""
