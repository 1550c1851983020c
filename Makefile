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

test: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python -m pytest -q -rs --strict-markers -p no:cacheprovider

# the unit tier: no process, server, stand-in or world build (tests/unit), plus the import-layering check
test-unit: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python -m pytest -q -rs --strict-markers -p no:cacheprovider \
		tests/unit tests/integration/test_import_cycles.py

bench: setup
	$(VENV)/bin/python benchmarks/bench_retrievers.py --triples 1000000
	$(VENV)/bin/python benchmarks/bench_dpp.py
