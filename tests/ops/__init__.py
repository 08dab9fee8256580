"""Operating rsched: schedule health, events and alerts, metrics and the alerting rules."""
