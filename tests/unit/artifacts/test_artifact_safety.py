"""Edited manifests, program states and predictions rows are refused with one line naming the field; evaluation
folders are locked; the CLI's last-resort handler turns any unexpected exception into one line plus a log file."""

from __future__ import annotations

import json

import pytest
from rowkit import CLOSEDBOOK_ROW as GOOD, edit_manifest

from hqa.errors import ArtifactError, DataError, HQAError
from hqa.schemas.run_folder import lock_folder, read_rows
from hqa.artifacts.store import load_program, save_artifact


def test_demo_count_is_bounded_by_configuration(settings_for, tmp_path):
    import dspy

    from hqa.artifacts.store import manifest_checksum
    from hqa.io.files import file_digest
    from hqa.programs.closedbook import ClosedBook

    prog = ClosedBook()
    art = save_artifact(prog, tmp_path / "cb", {"program": "closedbook", "program_kwargs": {}})
    state = json.loads((art / "program.json").read_text())
    name = next(iter(k for k in state if k != "metadata"))
    state[name]["demos"] = [dspy.Example(question=f"q{i}", answer="a").toDict() for i in range(200)]
    (art / "program.json").write_text(json.dumps(state))
    edit_manifest(art, program_sha256=file_digest(art / "program.json"))
    sealed = json.loads((art / "manifest.json").read_text())
    edit_manifest(art, manifest_sha256=manifest_checksum(sealed))  # checksums match: only the bound stops it
    with pytest.raises(ArtifactError, match=rf"'{name}.demos' has 200 demos; at most 64"):
        load_program(art, settings_for())
    loaded, _ = load_program(art, settings_for(lm_max_demos=200))
    assert len(loaded.named_predictors()[0][1].demos) == 200


@pytest.mark.parametrize("row,field", [
    ({}, "lacks field 'id'"),
    ({**GOOD, "answer": 5}, "'answer' must be str"),
    ({**GOOD, "scores": "high"}, "'scores' must be dict"),
    ({**GOOD, "scores": {"em": "1"}}, "'scores.em' must be a number"),
    ({**GOOD, "gold": "A"}, "'gold' must be list"),
    ({**GOOD, "gold": [1]}, "'gold' must be a list of strings"),
    ({**GOOD, "trace": []}, "'trace' must be dict"),
    ({**GOOD, "seconds": True}, "'seconds' must be"),
    ({**GOOD, "extra": 1}, "unknown field 'extra'"),
    ([1, 2], "must be a JSON object"),
])
def test_bad_rows_are_refused_naming_the_field(tmp_path, row, field):
    path = tmp_path / "predictions.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DataError, match="line 2") as err:
        read_rows(path)
    assert field in str(err.value)


def test_cut_short_last_line_is_still_skipped_and_invalid_utf8_reads_as_replacement(tmp_path):
    path = tmp_path / "predictions.jsonl"
    raw = json.dumps({**GOOD, "answer": "caf\u00e9"}, ensure_ascii=False).encode().replace("\u00e9".encode(), b"\xe9")
    path.write_bytes(raw + b"\n" + json.dumps(GOOD)[:30].encode())
    rows = read_rows(path)
    assert len(rows) == 1 and rows[0]["answer"] == "caf\ufffd"


def test_evaluate_holds_the_lock_while_it_writes(tmp_path):
    import dspy

    from hqa.jobs.evaluate import evaluate

    seen = []

    class Probe(dspy.Module):
        def forward(self, question):
            try:
                lock_folder(tmp_path)
            except HQAError as exc:
                seen.append(str(exc))
            return dspy.Prediction(answer="x")

    examples = [dspy.Example(id="a", question="q", answers=["x"]).with_inputs("question")]
    summary = evaluate(Probe(), examples, out=tmp_path / "predictions.jsonl")
    assert summary.n == 1 and len(seen) == 1 and "another run" in seen[0]
    lock_folder(tmp_path).close()  # released afterwards


def test_undecodable_argument_bytes_become_replacement_characters():
    import os as _os

    from hqa.cli.output import repair_text

    arg = _os.fsdecode(b"Who is caf\xe9 \xff?")  # how Python hands over argv bytes that are not UTF-8
    assert repair_text(arg) == "Who is caf\ufffd \ufffd?"
    assert repair_text("ok \u00e9") == "ok \u00e9"
    assert "?" not in repair_text("\ud800x") and "\ufffd" in repair_text("\ud800x")
