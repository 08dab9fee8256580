"""Tools for trying rsched: the demo and the embedded server and cluster.

May import everything.
"""
