"""I/O primitives: atomic files, cooperative cancellation, stderr logging, the waits between HTTP tries."""
