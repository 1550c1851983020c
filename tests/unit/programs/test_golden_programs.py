"""Every program, and the shipped default program, answers the fixed question set of tests/golden_programs.py with
the same answers, traces and prompts as recorded in tests/data/golden_programs.json before the wiring refactor of
issue 25 (regenerate with ``python tests/golden_programs.py`` only for a change that means to alter behaviour, and
say why in the commit)."""

from __future__ import annotations

import json

import pytest
from golden_programs import ARMS, GOLDEN, run_all


@pytest.fixture(scope="module")
def results(built_pack):
    return run_all(built_pack)


@pytest.mark.parametrize("arm", [a[0] for a in ARMS])
def test_answers_traces_and_prompts_are_the_recorded_ones(arm, results):
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert results[arm] == golden[arm]
