"""The library follows the dataset: every dataset name the registry knows maps to its benchmark's HumanIQ library,
or is named as having none (issue 54)."""

from __future__ import annotations

from hqa.data.datasets import DATASET_SPECS
from hqa.data.human import BENCHMARK_LIBRARY, NO_LIBRARY, benchmark_library
from hqa.scoring.stats import benchmark_of


def test_every_registered_dataset_has_its_benchmarks_library_or_is_named_without_one():
    names = set(DATASET_SPECS)
    assert names - set(BENCHMARK_LIBRARY) == set(NO_LIBRARY)
    assert set(BENCHMARK_LIBRARY) <= names  # no stale name
    for name in BENCHMARK_LIBRARY:  # the library is the benchmark the reports put the dataset in
        assert benchmark_library(name) == benchmark_of(name), name
        assert benchmark_library(f"{name}:answerable") == benchmark_of(name)
