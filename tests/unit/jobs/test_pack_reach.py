"""evaluate's one line when the knowledge pack holds the gold answers of only some questions (issue 53: a dataset
the pack does not cover scored 0 without a word)."""

from __future__ import annotations

from pathlib import Path

from hqa.config import load_settings
from hqa.jobs.evaluate import pack_reach_note

from tests.unit.data.test_answerable import _pack, rec


def settings(tmp_path, **overrides):
    return load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(tmp_path), **overrides)


RECORDS = [rec("a", "Who wrote Animal Farm?", ["George Orwell"], ["Q2"], ["Q1"]),
           rec("b", "Who painted the Mona Lisa?", ["Leonardo da Vinci"], ["Q762"], ["Q12418"])]


def test_a_pack_that_holds_some_answers_says_how_many(tmp_path):
    _pack(tmp_path)
    line = pack_reach_note(settings(tmp_path), "toy", RECORDS)
    assert line is not None
    assert "holds the gold answer of 1 of these 2 toy questions" in line and "toy:answerable keeps the 1" in line


def test_no_line_when_every_answer_is_held_or_the_pack_is_not_read(tmp_path):
    _pack(tmp_path)
    assert pack_reach_note(settings(tmp_path), "toy", RECORDS[:1]) is None
    assert pack_reach_note(settings(tmp_path), "toy:answerable", RECORDS) is None
    assert pack_reach_note(settings(tmp_path, text_kind="wikipedia", linker_kind="wikidata"), "toy", RECORDS) is None
    assert pack_reach_note(settings(tmp_path / "elsewhere"), "toy", RECORDS) is None  # no pack built there
