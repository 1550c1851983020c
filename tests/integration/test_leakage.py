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
from conftest import DemoSensitiveLM, predictor_states

from hqa.data.datasets import load_examples
from hqa.data.datasets import question_key
from hqa.jobs import compile as jobs
from hqa.artifacts.store import load_program
from hqa.optimize.compile import CompileOptions, compile_program, exclude_overlap, human_library, merge_demos

HUMAN = ("mintaka", "qald", "compmix")


@pytest.fixture(scope="module")
def overlap():
    """compmix/train examples whose question has a human trace or a human merge example."""
    keys = {question_key(d.question) for d in human_library(HUMAN)} | {question_key(d.question)
                                                                      for d in merge_demos(HUMAN)}
    found = [ex for ex in load_examples("compmix/train", None) if question_key(ex.question) in keys]
    assert len(found) >= 20
    return found


@pytest.fixture()
def settings(settings_for, tmp_path):
    return settings_for(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")


def variant(ex, i: int):
    """The same question as another dataset may spell it: other case and spacing."""
    q = ex.question.upper() if i % 2 else ex.question.replace(" ", "  ").lower()
    return dspy.Example(**{**ex.toDict(), "question": q, "id": f"variant-{i}"}).with_inputs("question")


def compile_with(settings, monkeypatch, splits: dict, **kw):
    monkeypatch.setattr(jobs, "load_examples", lambda spec, limit: list(splits[spec]))
    opts = CompileOptions(train="train", dev="dev", train_limit=None, dev_limit=None, **kw)
    result = jobs.compile_and_save(settings, opts, evaluate_dev=False, force=True)  # one name per program + optimizer
    program, _ = load_program(result["artifact"], settings)
    return program


def compile_direct(dev, **kw):
    opts = CompileOptions(train="compmix/dev", dev="compmix/train", **kw)
    program, _ = compile_program(opts, load_examples("compmix/dev", 2), dev)
    return program


def demo_questions(program) -> list[str]:
    return [d["question"] for s in predictor_states(program).values() for d in s["demos"] if "question" in d]


def assert_no_leak(program, dev):
    keys = {question_key(ex.question) for ex in dev}
    shown = demo_questions(program)
    assert shown, "the program has no demos: nothing was checked"
    leaked = sorted({q for q in shown if question_key(q) in keys})
    assert not leaked, f"dev questions among the demos: {leaked}"


@pytest.mark.parametrize("program", ["hqa", "static", "latefusion", "detllm"])
def test_labeled_human_never_shows_a_dev_question(program, overlap):
    dev = overlap[:12]
    compiled = compile_direct(dev, program=program, optimizer="labeled-human", k=100)
    assert_no_leak(compiled, dev)
    # and the library questions outside dev are still shown (exclusion is by question, not wholesale)
    assert {question_key(q) for q in demo_questions(compiled)} & {question_key(ex.question) for ex in overlap[12:]}


def test_bootstrap_drops_train_questions_that_are_dev_questions(overlap, settings, monkeypatch, pack_toolbox):
    dev = overlap[:4]
    train = load_examples("compmix/dev", 3) + [variant(ex, i) for i, ex in enumerate(dev)]
    lm = DemoSensitiveLM(chain=False, known={ex.question: ex.answers[0] for ex in train})
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        compiled = compile_with(settings, monkeypatch, {"train": train, "dev": dev}, program="closedbook",
                                optimizer="bootstrap", metric="em", max_bootstrapped_demos=len(train))
    assert_no_leak(compiled, dev)
    assert len(demo_questions(compiled)) == 3  # every other train question was traced


def test_dpp_never_selects_the_question_itself(overlap):
    dev = overlap[:12]
    compiled = compile_direct(dev, program="hqa", optimizer="dpp-human", k=3, program_kwargs={"max_iters": 2})
    assert_no_leak(compiled, dev)  # the fixed merge demos
    compiled.k = len(compiled.library)  # every candidate that is not excluded gets selected
    lib_keys = {question_key(d.question) for d in compiled.library}
    # dev questions and evaluation questions alike: the selection for a question never holds that question
    for ex in dev[:4] + overlap[-2:]:
        key = question_key(ex.question)
        picked = [question_key(d.question) for d in compiled.select(ex.question)]
        assert key not in picked, ex.question
        if key in lib_keys:
            assert len(picked) < len(compiled.library)


def test_exclude_overlap_matches_normalised_questions():
    dev = load_examples("compmix/dev", 3)
    other = load_examples("compmix/test", 2)
    train = other + [variant(ex, i) for i, ex in enumerate(dev)]
    kept = exclude_overlap(train, dev)
    assert [ex.question for ex in kept] == [ex.question for ex in other]
    assert exclude_overlap(train, []) == train


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


def test_exclude_eval_without_a_mirror_leaves_out_only_the_mirror_only_excerpt(tmp_path, monkeypatch):
    """On a machine with neither the derived Mintaka excerpt nor a mirror, the excerpt cannot be evaluated on, so
    ``--exclude eval`` does not ask for it (it used to stop with "derived and has no public origin"); every set with a
    public origin stays excluded, and with a mirror set the excerpt is excluded too."""
    from hqa.data.datasets import EVAL_SETS

    monkeypatch.delenv("HQA_DATA_MIRROR", raising=False)
    monkeypatch.setenv("HQA_PATHS__DATA", str(tmp_path / "empty-data-dir"))
    opts = CompileOptions(program="simple", train="compmix/train", exclude=("eval",))
    assert opts.exclude_specs() == tuple(s for s in EVAL_SETS if s != "mintaka")
    assert CompileOptions(program="simple", exclude=("mintaka",)).exclude_specs() == ("mintaka",)  # asked by name
    monkeypatch.setenv("HQA_DATA_MIRROR", str(tmp_path / "a-mirror"))
    assert opts.exclude_specs() == EVAL_SETS
