"""hqa's version, importable without the package facade (``hqa.load`` opens programs, so modules below it read the
version here)."""

__version__ = "0.1.0"
