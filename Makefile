.PHONY: setup demo test bench
VENV ?= .venv
QUESTION ?= Who is the author of Animal Farm?

setup:
	./scripts/setup

demo: setup
	$(VENV)/bin/hqa ask "$(QUESTION)"

test: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python -m pytest -q -rs --strict-markers -p no:cacheprovider

bench: setup
	$(VENV)/bin/python benchmarks/bench_retrievers.py --triples 1000000
	$(VENV)/bin/python benchmarks/bench_dpp.py
