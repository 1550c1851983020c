.PHONY: setup demo test bench
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

bench: setup
	$(VENV)/bin/python benchmarks/bench_retrievers.py --triples 1000000
	$(VENV)/bin/python benchmarks/bench_dpp.py
