"""No dev or evaluation question reaches a compiled program as a demonstration.

The dev sets here are the compmix/train questions that the human solution processes (and merge examples) were
written for, so every human optimizer would show a dev question its own trace unless it is excluded.  k is larger
than the library, so a demo that should have been excluded is certainly chosen.  The bootstrap compile goes
through ``compile_and_save`` (the ``hqa compile`` path, which drops train questions that are dev questions) with
the data specs resolved to these lists; the human optimizers exclude inside ``compile_program``.
"""

from __future__ import annotations

import dspy
import pytest
from conftest import DemoSensitiveLM
from demokit import assert_no_leak, demo_questions, variant

from hqa.data.datasets import load_examples
from hqa.jobs import compile as jobs
from hqa.artifacts.store import load_program
from hqa.optimize.compile import CompileOptions


@pytest.fixture()
def settings(settings_for, tmp_path):
    return settings_for(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")


def compile_with(settings, monkeypatch, splits: dict, **kw):
    monkeypatch.setattr(jobs, "load_examples", lambda spec, limit: list(splits[spec]))
    opts = CompileOptions(train="train", dev="dev", train_limit=None, dev_limit=None, **kw)
    result = jobs.compile_and_save(settings, opts, evaluate_dev=False, force=True)  # one name per program + optimizer
    program, _ = load_program(result["artifact"], settings)
    return program


def test_bootstrap_drops_train_questions_that_are_dev_questions(overlap, settings, monkeypatch, pack_toolbox):
    dev = overlap[:4]
    train = load_examples("compmix/dev", 3) + [variant(ex, i) for i, ex in enumerate(dev)]
    lm = DemoSensitiveLM(chain=False, known={ex.question: ex.answers[0] for ex in train})
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        compiled = compile_with(settings, monkeypatch, {"train": train, "dev": dev}, program="closedbook",
                                optimizer="bootstrap", metric="em", max_bootstrapped_demos=len(train))
    assert_no_leak(compiled, dev)
    assert len(demo_questions(compiled)) == 3  # every other train question was traced


def test_bootstrap_drops_train_questions_of_every_excluded_set(settings, monkeypatch, pack_toolbox):
    """``--exclude eval``: a train question that any evaluation set holds (QALD-10, CompMix test, ...) never becomes
    a demo, however it is spelled; the dev set is excluded as before."""
    from hqa.data.datasets import EVAL_SETS

    dev = load_examples("compmix/dev", 2)
    held_out = load_examples("qald10", 2) + load_examples("compmix/test", 2) + load_examples("bamboogle", 1)
    train = load_examples("compmix/train", 3) + [variant(ex, i) for i, ex in enumerate(held_out)]
    lm = DemoSensitiveLM(chain=False, known={ex.question: ex.answers[0] for ex in train})
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        compiled = compile_with(settings, monkeypatch, {"train": train, "dev": dev}, program="closedbook",
                                optimizer="bootstrap", metric="em", max_bootstrapped_demos=len(train),
                                exclude=("eval",))
    assert_no_leak(compiled, held_out + dev)
    assert len(demo_questions(compiled)) == 3  # the three compmix/train questions
    assert CompileOptions(program="simple", train="compmix/train", exclude=("eval",)).exclude_specs() == EVAL_SETS
    with pytest.raises(Exception, match="unknown dataset"):
        CompileOptions(program="simple", exclude=("nope",)).validate()
