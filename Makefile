.PHONY: setup demo test test-unit bench
VENV ?= .venv
QUESTION ?= Who is the author of Animal Farm?
# this project's machines keep a mirror of every dataset beside the checkout: use it when it is there (hqa data list)
ifneq ($(wildcard ../shared/data),)
export HQA_DATA_MIRROR ?= $(abspath ../shared/data)
endif

setup:
	./scripts/setup

demo: setup
	$(VENV)/bin/hqa ask "$(QUESTION)"

# the suite runs in TEST_WORKERS pytest-xdist processes, each given whole test files (--dist loadfile: a module's
# fixtures are built once); on this project's 2-core machine 2 workers took the whole suite from 11-13 to 8-9 minutes
# (docs/benchmarks.md, "Test suite wall time"). TEST_WORKERS=0 runs it in this one process.
TEST_WORKERS ?= 2
PYTEST = PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python -m pytest -q -rs --strict-markers -p no:cacheprovider \
	-n $(TEST_WORKERS) --dist loadfile

test: setup
	$(PYTEST)

# the unit tier: no process, server, stand-in or world build (tests/unit), plus the import-layering check
test-unit: setup
	$(PYTEST) tests/unit tests/integration/test_import_cycles.py

bench: setup
	$(VENV)/bin/python benchmarks/bench_retrievers.py --triples 1000000
	$(VENV)/bin/python benchmarks/bench_dpp.py
