"""Integration tests (real LM, servers, live stand-ins, worlds); a package so that a file here may share its name with its unit half."""
