"""The SDK (async and blocking clients, schedules files) against real servers."""
