"""Every optimizer the CLI accepts, compiled with a tiny budget on :class:`conftest.DemoSensitiveLM`.

The LM answers half of the train questions from the start (so bootstrapping finds traces) and the other half and the
dev questions only under an optimized prompt (at least one demo, or an instruction it proposed itself).  A search
optimizer that kept the zero-shot program therefore scores 0 on dev; one that kept what it found scores 1.
``none``, ``labeled-human``, ``bootstrap`` and ``dpp-human`` are compiled in tests/integration/test_roundtrip.py.
"""

from __future__ import annotations

import re

import dspy
import pytest
from conftest import predictor_states
from lmkit import lm_for, split

from hqa.scoring.metrics import exact_match
from hqa.artifacts.store import load_program, save_artifact
from hqa.optimize.compile import OPTIMIZERS, CompileOptions, compile_program

PROPOSED = re.compile(r"^d[0-9a-f]{12}$")
COVERED_ELSEWHERE = {"none", "labeled-human", "bootstrap", "dpp-human"}


def dev_em(program, dev) -> float:
    return sum(exact_match(program(question=ex.question).answer, ex.answers) for ex in dev) / len(dev)


def round_trip(program, name, info, tmp_path, kwargs=None):
    art = save_artifact(program, tmp_path / name.replace("+", "-").replace(":", "-"),
                        {"program": name.split(":")[0], "program_kwargs": kwargs or {}, "wrapper": info["wrapper"]})
    loaded, _ = load_program(art, toolbox=getattr(getattr(program, "program", program), "toolbox", None))
    assert predictor_states(loaded) == predictor_states(program)
    return loaded


@pytest.mark.parametrize("optimizer", ["bootstrap-rs", "mipro", "gepa"])
def test_search_optimizers_keep_the_program_they_found(optimizer, tmp_path):
    train, dev = split()
    lm = lm_for(train, dev)
    opts = CompileOptions(program="closedbook", optimizer=optimizer, train="compmix/dev", dev="humaniq-compmix",
                          train_limit=6, dev_limit=3, metric="em", num_candidates=1, budget=12)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        zero, _ = compile_program(CompileOptions(program="closedbook"), train, dev)
        assert dev_em(zero, dev) == 0.0
        program, info = compile_program(opts, train, dev)
        state = predictor_states(program)["generate"]
        if optimizer in ("bootstrap-rs", "mipro"):
            # two demos: bootstrapped traces or labeled train rows (which carry the gold "answer")
            assert len(state["demos"]) == 2 and all(d.get("answer") for d in state["demos"])
        if optimizer in ("mipro", "gepa"):
            assert PROPOSED.match(state["instructions"]), state["instructions"]  # the proposed instruction won
        assert dev_em(program, dev) == 1.0
        loaded = round_trip(program, f"closedbook:{optimizer}", info, tmp_path)
        assert dev_em(loaded, dev) == 1.0


def test_human_plus_bootstrap_bootstraps_from_the_human_seeded_teacher(pack_toolbox, tmp_path):
    train, dev = split()
    lm = lm_for(train, dev)
    opts = CompileOptions(program="static", optimizer="human+bootstrap", train="compmix/dev", dev="humaniq-compmix",
                          train_limit=6, dev_limit=3, metric="em", k=2, max_bootstrapped_demos=len(train))
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        program, info = compile_program(opts, train, dev, pack_toolbox)
    states = predictor_states(program)
    merge = states["sources.merge"]["demos"]
    # the teacher carried human merge demos, so the questions the LM answers only under a demo were traced too
    # (the zero-shot student alone traces train[:3] only)
    assert merge and all(d.get("augmented") for d in merge)
    assert {d["question"] for d in merge} == {ex.question for ex in train}
    assert not any(d.get("source") == "human" for d in merge)  # the student keeps traces, not the human demos
    round_trip(program, "static:human+bootstrap", info, tmp_path)


@pytest.mark.parametrize("optimizer,mode", [("relevance-human", "relevance"), ("diversity-human", "diversity"),
                                            ("random-human", "random")])
def test_dpp_ablations_select_k_human_demos_per_question(optimizer, mode, tmp_path):
    train, dev = split()
    opts = CompileOptions(program="hqa", optimizer=optimizer, train="compmix/dev", dev="humaniq-compmix",
                          train_limit=6, dev_limit=3, k=3, program_kwargs={"max_iters": 2})
    program, info = compile_program(opts, train, dev)
    assert info["wrapper"] == "dpp" and program.mode == mode and program.k == 3
    picks = {ex.question: [d.id for d in program.select(ex.question)] for ex in dev}
    assert all(len(ids) == 3 and len(set(ids)) == 3 for ids in picks.values())
    loaded = round_trip(program, "hqa", info, tmp_path, {"max_iters": 2})
    assert loaded.mode == mode
    assert {q: [d.id for d in loaded.select(q)] for q in picks} == picks


def test_every_cli_optimizer_is_compiled_somewhere():
    from pathlib import Path

    here = Path(__file__).read_text() + (Path(__file__).parent.parent.parent / "integration" / "test_roundtrip.py").read_text()
    tested = set(re.findall(r'"([a-z+-]+(?:-human|-rs)?)"', here)) & set(OPTIMIZERS)
    assert set(OPTIMIZERS) - tested == set()
    assert COVERED_ELSEWHERE <= set(OPTIMIZERS)


def test_validating_a_human_optimizer_builds_the_default_program_once_per_name(monkeypatch):
    """Whether a program draws on a HumanIQ library is read from a default-built program once per name: a compare
    validates every arm's options again, and none of them builds another."""
    import functools

    from hqa.programs.humaniq import HumanIQAgent

    built = []
    real = HumanIQAgent.__init__

    @functools.wraps(real)
    def counted(self, *args, **kwargs):
        built.append(kwargs)
        real(self, *args, **kwargs)

    monkeypatch.setattr(HumanIQAgent, "__init__", counted)
    for optimizer in ("labeled-human", "dpp-human", "random-human"):
        CompileOptions(program="humaniq", optimizer=optimizer, dev="humaniq-compmix").validate()
    assert len(built) <= 1
