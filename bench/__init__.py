"""rsched benchmarks: ``python -m bench`` (``make bench``)."""
