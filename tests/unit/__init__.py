"""Unit tests, one folder per hqa package; a package so that a file here may share its name with its integration half."""
