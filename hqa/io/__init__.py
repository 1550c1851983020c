"""I/O primitives: atomic files, cooperative cancellation, stderr logging."""
