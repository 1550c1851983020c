"""MLflow: runs and traces (runs), what a run ran with (record), registry aliases and run lists (registry)."""
