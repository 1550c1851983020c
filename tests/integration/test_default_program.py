"""The compiled default program shipped in the package (hqa/data/default_program, built by scripts/compile-default):
what it was compiled on, that no evaluation question reached its demos, and that every entry point uses it unless
told otherwise."""

from __future__ import annotations

import json

import pytest

from hqa.app import DEFAULT_PROGRAM_DIR, default_program_dir, open_program
from hqa.data.datasets import EVAL_SETS, load_dataset, question_key
from hqa.artifacts.store import load_program


@pytest.fixture(scope="module")
def shipped():
    assert default_program_dir() == DEFAULT_PROGRAM_DIR, "hqa/data/default_program is missing: scripts/compile-default"
    manifest = json.loads((DEFAULT_PROGRAM_DIR / "manifest.json").read_text())
    state = json.loads((DEFAULT_PROGRAM_DIR / "program.json").read_text())
    return manifest, state


def demo_questions(state: dict) -> list[str]:
    return [d["question"] for name, entry in state.items() if isinstance(entry, dict) and "demos" in entry
            for d in entry["demos"] if "question" in d]


def test_compiled_with_the_projects_optimizer_on_train_questions_of_the_offline_world(shipped):
    manifest, state = shipped
    assert (manifest["program"], manifest["optimizer"]) == ("simple", "bootstrap")
    assert manifest["data"]["train"] == "compmix/train:answerable" and manifest["data"]["dev"] == "compmix/dev:answerable"
    assert set(EVAL_SETS) <= set(manifest["data"]["excluded"])
    shown = demo_questions(state)
    assert shown, "no demos: nothing was compiled"
    train = {question_key(r.question) for r in load_dataset("compmix/train")}
    assert all(question_key(q) in train for q in shown)


def test_no_evaluation_question_reaches_a_demo(shipped):
    _, state = shipped
    shown = {question_key(q) for q in demo_questions(state)}
    for spec in EVAL_SETS:
        leaked = sorted(shown & {question_key(r.question) for r in load_dataset(spec)})
        assert not leaked, f"{spec} questions among the shipped demos: {leaked}"


@pytest.fixture(scope="module")
def default_pack(tmp_path_factory):
    """The pack as `hqa pack build` builds it, with the installed Wikipedia leads (the session's pack keeps to the
    recorded sources): the one the shipped program was compiled on."""
    from hqa.world.pack import build_pack

    artifacts = tmp_path_factory.mktemp("default-artifacts")
    build_pack(artifacts / "pack")
    return artifacts


def test_entry_points_load_it_unless_told_otherwise(default_pack, shipped):
    from pathlib import Path

    from hqa.config import load_settings

    _, state = shipped
    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(default_pack))
    opened = open_program(settings, configure=False)
    assert (opened.label, opened.kind, opened.source) == ("default", "simple", str(DEFAULT_PROGRAM_DIR))
    assert opened.warnings == []  # same pack, LM, embedder and reranker as it was compiled with
    loaded = {name: p.dump_state()["demos"] for name, p in opened.program.named_predictors()}
    assert loaded == {name: entry["demos"] for name, entry in state.items() if name in loaded}
    assert open_program(settings, program="simple", configure=False).label == "simple"  # told otherwise
    program, _ = load_program(DEFAULT_PROGRAM_DIR, settings)
    assert type(program).__name__ == "SimpleHybrid"
