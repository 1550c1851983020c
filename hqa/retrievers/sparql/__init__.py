"""SPARQL: the read-only guard, the backends, the worker pool, labels and results."""
