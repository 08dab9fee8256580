"""rsched.web: the HTTP API and the dashboard, over real HTTP and in a real browser."""
