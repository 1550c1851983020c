"""No dev or evaluation question reaches a compiled program as a demonstration.

The dev sets here are the compmix/train questions that the human solution processes (and merge examples) were
written for, so every human optimizer would show a dev question its own trace unless it is excluded.  k is larger
than the library, so a demo that should have been excluded is certainly chosen.  The bootstrap compile goes
through ``compile_and_save`` (the ``hqa compile`` path, which drops train questions that are dev questions) with
the data specs resolved to these lists; the human optimizers exclude inside ``compile_program``.
"""

from __future__ import annotations

import pytest
from demokit import assert_no_leak, demo_questions, variant

from hqa.data.datasets import load_examples
from hqa.data.datasets import question_key
from hqa.optimize.compile import CompileOptions, compile_program, exclude_overlap


def compile_direct(dev, **kw):
    opts = CompileOptions(train="compmix/dev", dev="compmix/train", **kw)
    program, _ = compile_program(opts, load_examples("compmix/dev", 2), dev)
    return program


@pytest.mark.parametrize("program", ["hqa", "static", "latefusion", "detllm"])
def test_labeled_human_never_shows_a_dev_question(program, overlap):
    dev = overlap[:12]
    compiled = compile_direct(dev, program=program, optimizer="labeled-human", k=100)
    assert_no_leak(compiled, dev)
    # and the library questions outside dev are still shown (exclusion is by question, not wholesale)
    assert {question_key(q) for q in demo_questions(compiled)} & {question_key(ex.question) for ex in overlap[12:]}


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
