"""Issue 25's wiring: a program answers with the toolbox it was given (no process-global lookup), program metadata
is read from the class, the ``hqa`` program name keeps working as ``humaniq`` with one deprecation line (CLI, build,
saved artifacts), and opening a compiled program to answer never imports the compile package."""

from __future__ import annotations

import json

import dspy
import pytest
from conftest import KeepOrderReranker, fake_bm25
from dspy.utils import DummyLM

from hqa.retrievers.base import Evidence
from hqa.toolbox import Toolbox


def _dense(title: str, calls: list):
    def dense(query, k=5):
        calls.append(query)
        return [Evidence(text=f"{title} is the capital.", source="text", score=0.9, meta={"id": title, "title": title})]

    return dense


def test_each_program_answers_with_the_toolbox_it_was_given(settings_for):
    from hqa.app import open_program

    settings = settings_for(programs_answer_mode="free")
    calls_a, calls_b = [], []
    tb_a = Toolbox(settings, dense=_dense("Alpha", calls_a), bm25=fake_bm25, reranker=KeepOrderReranker())
    tb_b = Toolbox(settings, dense=_dense("Beta", calls_b), bm25=fake_bm25, reranker=KeepOrderReranker())
    a = open_program(settings, "simple", configure=False, toolbox=tb_a)
    b = open_program(settings, "simple", configure=False, toolbox=tb_b)  # opened last: a global would be this one
    assert a.program.toolbox is tb_a and a.toolbox is tb_a and b.program.toolbox is tb_b
    lm = DummyLM([{"answer": "memory"}, {"answer": "x"}] * 2)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = a.program(question="What is the capital?")
    assert calls_a and not calls_b
    assert [e["meta"]["title"] for e in pred.trace["passages"]] == ["Alpha"]


def test_a_program_without_a_toolbox_says_how_to_get_one():
    from hqa.errors import ConfigError
    from hqa.programs import build_program

    with pytest.raises(ConfigError, match="needs a toolbox"):
        build_program("static")(question="q")


def test_metadata_is_read_from_the_classes_without_building_them(monkeypatch):
    from hqa.optimize.compile import dpp_programs, human_programs
    from hqa.programs import PROGRAMS, program_class
    from hqa.programs.base import Program

    def no_build(self, *args, **kwargs):
        raise AssertionError("a program was built to read its metadata")

    for name in PROGRAMS:
        monkeypatch.setattr(program_class(name), "__init__", no_build)
    assert human_programs() == ("humaniq", "static", "latefusion", "detllm", "sscot")
    assert dpp_programs() == ("humaniq", "static", "latefusion", "sscot")
    needs = {n for n in PROGRAMS if program_class(n).needs_toolbox}
    assert needs == {"simple", "humaniq", "static", "latefusion", "detllm", "sscot"}
    assert {n for n in PROGRAMS if program_class(n).writes_sparql} == needs - {"simple"}
    assert all(issubclass(program_class(n), Program) for n in PROGRAMS)


def test_the_hqa_name_builds_humaniq_with_one_deprecation_line(capsys, monkeypatch):
    import hqa.programs as P
    from hqa.cli.entry import build_parser
    from hqa.programs.humaniq import HumanIQAgent

    monkeypatch.setattr(P, "_warned", set())
    assert build_parser().parse_args(["ask", "--program", "hqa", "q"]).program == "hqa"
    assert type(P.build_program("hqa")) is HumanIQAgent
    assert type(P.build_program("hqa")) is HumanIQAgent
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["hqa: program 'hqa' is now called 'humaniq'; 'hqa' keeps working for now"]


def test_an_artifact_saved_as_program_hqa_loads_as_humaniq(tmp_path, settings_for):
    from hqa.artifacts.store import load_program, save_artifact
    from hqa.io.files import file_digest
    from hqa.errors import ArtifactError
    from hqa.programs.humaniq import HumanIQAgent

    agent = HumanIQAgent(max_iters=2)
    agent.react.demos = [dspy.Example(question="q", next_tool_name="Finish")]
    art = save_artifact(agent, tmp_path / "old", {"program": "humaniq", "program_kwargs": {"max_iters": 2}})
    manifest = json.loads((art / "manifest.json").read_text())  # as an earlier hqa wrote it
    manifest["program"], manifest["program_kwargs"]["toolbox"] = "hqa", "default"
    state = json.loads((art / "program.json").read_text())
    state["hqa"]["program"] = "hqa"
    (art / "program.json").write_text(json.dumps(state))
    manifest["program_sha256"] = file_digest(art / "program.json")
    manifest.pop("manifest_sha256")  # earlier hqa wrote no manifest checksum
    (art / "manifest.json").write_text(json.dumps(manifest))
    tb = Toolbox(settings_for())
    loaded, got = load_program(art, settings_for(), tb)
    assert type(loaded) is HumanIQAgent and got["program"] == "humaniq" and got["program_kwargs"] == {"max_iters": 2}
    assert loaded.toolbox is tb and loaded.max_iters == 2 and len(loaded.react.demos) == 1
    from hqa.app import open_program, with_options
    from hqa.errors import ConfigError

    opened = open_program(settings_for(), load=art, configure=False, toolbox=tb, benchmark="mintaka")
    # a compiled program keeps its own demos: no answer-time selection is wrapped around it
    assert type(opened.program) is HumanIQAgent and len(opened.program.react.demos) == 1
    with pytest.raises(ConfigError, match="keeps its own demos"):
        with_options(opened.program, {"human_library": "qald"})
    (art / "manifest.json").unlink()  # program.json alone is refused: the manifest is part of what is checksummed
    with pytest.raises(ArtifactError, match="manifest.json is missing"):
        load_program(art, settings_for(), tb)


def test_open_program_gives_the_programs_settings_as_constructor_arguments(settings_for):
    """``programs.answer_mode`` / ``choices`` / ``abstain`` / ``ranker`` are resolved once (``auto`` for the settings'
    LM) and passed to the constructor; an argument the caller gives wins."""
    from hqa.app import open_program

    tb = Toolbox(settings_for())
    local = open_program(settings_for(), "simple", configure=False, toolbox=tb)
    assert local.arguments == {"answer_mode": "grounded", "choices": 1, "abstain": "on", "ranker": "learned"}
    assert (local.program.answer_mode, local.program.choices, local.program.abstain) == ("grounded", 1, "on")
    assert open_program(settings_for(programs_ranker="hand"), "simple", configure=False,
                        toolbox=tb).program.ranker == "hand"
    remote = open_program(settings_for(lm_provider="openai", lm_model="gpt-4o-mini", programs_choices=3), "humaniq",
                          configure=False, toolbox=tb, program_kwargs={"max_iters": 2})
    assert remote.arguments == {"answer_mode": "free", "choices": 3, "human_library": "compmix"} \
        == remote.describe()["arguments"]
    assert (remote.program.program.sources.answer_mode, remote.program.program.sources.choices) == ("free", 3)
    given = open_program(settings_for(), "simple", configure=False, toolbox=tb, program_kwargs={"answer_mode": "free"})
    assert given.arguments == {"choices": 1, "abstain": "on", "ranker": "learned"} \
        and given.program.answer_mode == "free"
    shipped = open_program(settings_for(), configure=False, toolbox=tb)  # a compiled program gets them too
    assert shipped.arguments == {"answer_mode": "grounded", "choices": 1, "abstain": "on", "ranker": "learned"}
    assert shipped.program.answer_mode == "grounded"


def test_ask_and_batch_print_the_load_warnings_the_same_way(tmp_path, capsys, monkeypatch):
    import hqa.app
    from hqa.app import OpenedProgram
    from hqa.cli.entry import main
    from hqa.programs.closedbook import ClosedBook

    warning = "compiled with LM 'local:', running with 'openai:x': demos and instructions were chosen for the other one"
    monkeypatch.setattr(hqa.app, "open_program", lambda *a, **k: OpenedProgram(
        ClosedBook(), label="cb", kind="closedbook", source="x", warnings=[warning]))
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "Who wrote Animal Farm?"}) + "\n", encoding="utf-8")
    with dspy.context(lm=DummyLM([{"answer": "George Orwell"}] * 4), adapter=dspy.ChatAdapter()):
        assert main(["ask", "--program", "closedbook", "Who wrote Animal Farm?"]) == 0
        ask_err = capsys.readouterr().err
        assert main(["batch", str(questions), "--out", str(tmp_path / "a.jsonl"), "--program", "closedbook",
                     "--quiet"]) == 0
        batch_err = capsys.readouterr().err
    line = f"hqa: warning: {warning}"
    assert line in ask_err.splitlines() and line in batch_err.splitlines()
