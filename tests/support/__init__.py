"""What the tests share and are not tests themselves: private servers and clusters, fault and
secure servers, child processes, the one way to wait, and small readers of what rsched wrote."""
