"""``hqa`` command line."""
