"""The formats hqa reads back: predictions rows and manifests (records), the program trace (trace)."""
