"""Compile → save → load round trips of all eight programs under every optimizer that applies to them.

The LM is :class:`conftest.DemoSensitiveLM`: each reply is a digest of every prompt shown so far, so the loaded
program answers like the saved one only if every demo and every instruction survived.  The loaded predictors are
also compared with the compiled ones field by field, and a DPP program's human library entry by entry.
"""

from __future__ import annotations

import dspy
import pytest
from compilekit import QUESTION, answer, compile_case
from conftest import AGENT_FINISH, DemoSensitiveLM, predictor_states

from hqa.artifacts.store import load_program, save_artifact
from hqa.optimize.compile import human_programs
from hqa.programs import PROGRAMS


def _optimizers(program: str) -> list[str]:
    out = ["none"]
    if program in human_programs():
        out.append("labeled-human")
    out.append("bootstrap")
    if program == "hqa":
        out.append("dpp-human")
    return out


CASES = [(p, o) for p in PROGRAMS for o in _optimizers(p)]


@pytest.mark.parametrize("program,optimizer", CASES, ids=[f"{p}-{o}" for p, o in CASES])
def test_save_load_keeps_every_demo_and_instruction(program, optimizer, pack_toolbox, always_metric, tmp_path):
    lm = DemoSensitiveLM(fixed=AGENT_FINISH)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        opts, compiled, info = compile_case(program, optimizer, always_metric, pack_toolbox)
        saved = predictor_states(compiled)
        if optimizer != "none":  # the optimizer put demos somewhere, else the round trip proves nothing
            assert any(s["demos"] for s in saved.values()), f"{optimizer} left {program} without demos"
        art = save_artifact(compiled, tmp_path / f"{program}-{optimizer}",
                            {"program": program, "program_kwargs": opts.program_kwargs, "wrapper": info["wrapper"],
                             "optimizer": optimizer})
        loaded, manifest = load_program(art, toolbox=pack_toolbox)
        assert type(loaded) is type(compiled) and manifest["optimizer"] == optimizer
        got = predictor_states(loaded)
        assert list(got) == list(saved)
        for name in saved:
            assert got[name]["instructions"] == saved[name]["instructions"], name
            assert len(got[name]["demos"]) == len(saved[name]["demos"]), name
            for i, (g, s) in enumerate(zip(got[name]["demos"], saved[name]["demos"])):
                assert g == s, f"{name} demo {i} differs after loading"
        if info["wrapper"] == "dpp":
            assert [d.to_dict() for d in loaded.library] == [d.to_dict() for d in compiled.library]
            assert len(compiled.library) > 0
            assert (loaded.k, loaded.mode, loaded.seed) == (compiled.k, compiled.mode, compiled.seed)
            assert [d.id for d in loaded.select(QUESTION)] == [d.id for d in compiled.select(QUESTION)]
        # behaviour: the loaded program answers as the compiled one did, prompt for prompt
        before = answer(compiled, lm)
        prompts_before = list(lm.prompts)
        after = answer(loaded, lm)
        assert lm.prompts == prompts_before and after == before
        if optimizer != "none":  # and the demos matter: the zero-shot program answers otherwise
            zero, _ = compile_case(program, "none", always_metric, pack_toolbox)[1:]
            assert answer(zero, lm) != before
