"""Compile → save → load round trips of all eight programs under every optimizer that applies to them.

The LM is :class:`conftest.DemoSensitiveLM`: each reply is a digest of every prompt shown so far, so the loaded
program answers like the saved one only if every demo and every instruction survived.  The loaded predictors are
also compared with the compiled ones field by field, and a DPP program's human library entry by entry.
"""

from __future__ import annotations

import dspy
import pytest
from compilekit import answer, compile_case
from conftest import AGENT_FINISH, DemoSensitiveLM, predictor_states

from hqa.artifacts.store import load_program, save_artifact


def test_demo_sensitive_lm_notices_a_lost_demo_or_instruction():
    lm = DemoSensitiveLM()
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        predict.demos = [dspy.Example(question="q1", answer="a1"), dspy.Example(question="q2", answer="a2")]
        full = answer(predict, lm)
        assert answer(predict, lm) == full  # deterministic
        predict.demos = predict.demos[:1]
        assert answer(predict, lm) != full
        predict.demos = [dspy.Example(question="q1", answer="a1"), dspy.Example(question="q2", answer="a2")]
        predict.signature = predict.signature.with_instructions("Answer tersely.")
        assert answer(predict, lm) != full


@pytest.mark.parametrize("program,optimizer", [("hqa", "dpp-human"), ("detllm", "labeled-human")])
def test_saved_program_answers_as_compiled_model_changes_warn_and_a_lost_manifest_is_refused(
        program, optimizer, pack_toolbox, always_metric, tmp_path):
    """program.json describes itself (its reserved ``hqa`` entry), yet a folder without manifest.json is refused
    (the manifest is checksummed with it: issue 40); with it, the program answers as compiled, and a different
    embedder / LM than the recorded ones is a load warning."""
    from hqa.errors import ArtifactError

    import json

    from hqa.config import Settings

    lm = DemoSensitiveLM(fixed=AGENT_FINISH)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        opts, compiled, info = compile_case(program, optimizer, always_metric, pack_toolbox)
        recorded = Settings().as_dict()
        art = save_artifact(compiled, tmp_path / "self", {
            "program": program, "program_kwargs": opts.program_kwargs, "wrapper": info["wrapper"],
            "optimizer": optimizer, "settings": {k: recorded[k] for k in ("lm", "models")}})
        assert json.loads((art / "program.json").read_text())["hqa"]["program"] == program
        loaded, manifest = load_program(art, settings=Settings(), toolbox=pack_toolbox)
        assert type(loaded) is type(compiled) and manifest["warnings"] == []
        before = answer(compiled, lm)
        assert answer(loaded, lm) == before
        other = Settings()
        other.models.embedder = "/models/other-embedder"
        other.lm.provider, other.lm.model = "openai", "gpt-4o-mini"
        _, manifest = load_program(art, settings=other, toolbox=pack_toolbox)
        assert len(manifest["warnings"]) == 2
        assert "embedder 'minilm'" in manifest["warnings"][1] and "'openai:gpt-4o-mini'" in manifest["warnings"][0]
        (art / "manifest.json").unlink()
        with pytest.raises(ArtifactError, match="manifest.json is missing"):
            load_program(art, settings=Settings(), toolbox=pack_toolbox)


def test_program_json_from_before_the_source_merge_module_still_loads(pack_toolbox, always_metric, tmp_path):
    """Earlier versions saved the agent's ending as top-level ``parametric`` / ``merge`` predictors; such a file
    loads into today's ``sources.parametric`` / ``sources.merge`` with its demos."""
    import json

    lm = DemoSensitiveLM(fixed=AGENT_FINISH)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        opts, compiled, info = compile_case("static", "labeled-human", always_metric, pack_toolbox)
        art = save_artifact(compiled, tmp_path / "old", {"program": "static", "program_kwargs": opts.program_kwargs,
                                                         "optimizer": "labeled-human"})
        state = json.loads((art / "program.json").read_text())
        state["merge"], state["parametric"] = state.pop("sources.merge"), state.pop("sources.parametric")
        (art / "program.json").write_text(json.dumps(state))
        from hqa.artifacts.store import manifest_checksum
        from hqa.io.files import file_digest

        manifest = json.loads((art / "manifest.json").read_text())  # as the earlier hqa sealed it
        manifest["program_sha256"] = file_digest(art / "program.json")
        manifest["manifest_sha256"] = manifest_checksum(manifest)
        (art / "manifest.json").write_text(json.dumps(manifest))
        loaded, _ = load_program(art, toolbox=pack_toolbox)
        assert loaded.sources.merge.demos and predictor_states(loaded) == predictor_states(compiled)
        assert answer(loaded, lm) == answer(compiled, lm)
