"""User paths of the CLI, run in-process: ``hqa compile`` → ``ask --load`` / ``evaluate --load`` → ``runs``,
``hqa compare``, ``evaluate --fresh``, resuming a folder another program or dataset wrote, duplicate ids.

The LM is :class:`conftest.DemoSensitiveLM` (installed in place of the configured one), so a loaded program that
lost its demos answers differently from the compiled one; the knowledge pack is the session's real one.
"""

from __future__ import annotations


import dspy
import pytest

from hqa.data.datasets import load_examples


def test_duplicate_ids_are_one_clear_error(tmp_path):
    from hqa.errors import DataError
    from hqa.jobs.evaluate import evaluate

    examples = load_examples("humaniq-compmix", 2)
    examples = examples + [examples[0]]
    with pytest.raises(DataError, match=f"duplicate example id '{examples[0].id}'"):
        evaluate(dspy.Predict("question -> answer"), examples, out=tmp_path / "p.jsonl")
    assert not (tmp_path / "p.jsonl").exists()
