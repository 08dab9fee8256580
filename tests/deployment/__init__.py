"""rsched as deployed: clusters, partitions, durability, faults, TLS and least privilege."""
