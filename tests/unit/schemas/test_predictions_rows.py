"""predictions.jsonl read back on resume and by ``hqa report show``: a wrong-typed ``id`` is refused like every other
wrong type, unreadable lines are named in one warning, and a torn last line is repaired on resume."""

from __future__ import annotations

import json
import logging

import dspy
import pytest
from lmkit import _Echo
from rowkit import ROW as GOOD

from hqa.errors import DataError
from hqa.jobs.evaluate import evaluate
from hqa.schemas.run_folder import read_rows


def _examples(n: int) -> list:
    return [dspy.Example(id=f"id{i}", question=f"q{i}", answers=["a"], dataset="mintaka").with_inputs("question")
            for i in range(n)]


@pytest.mark.parametrize("bad_id", [7, 1.5, None, ["q"], {"q": 1}, True])
def test_an_id_that_is_not_a_string_is_refused(tmp_path, bad_id):
    path = tmp_path / "predictions.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "id": bad_id}) + "\n")
    with pytest.raises(DataError, match=r"line 2: field 'id' must be str, got"):
        read_rows(path)
    with pytest.raises(DataError, match=r"line 2: field 'id' must be str"):  # resume refuses it the same way
        evaluate(_Echo(), _examples(2), out=path)


def test_numeric_example_ids_are_written_as_strings_and_resume(tmp_path):
    examples = [dspy.Example(id=i, question=f"q{i}", answers=["a"]).with_inputs("question") for i in range(3)]
    out = tmp_path / "p.jsonl"
    evaluate(_Echo(), examples[:2], out=out)
    assert [r["id"] for r in read_rows(out)] == ["0", "1"]
    again = _Echo()
    summary = evaluate(again, examples, out=out)
    assert again.asked == ["q2"] and summary.n == 3


def test_unreadable_lines_are_named_in_one_warning(tmp_path, caplog):
    path = tmp_path / "predictions.jsonl"
    good = [json.dumps({**GOOD, "id": f"q{i}"}) for i in range(4)]
    path.write_text("\n".join([good[0], "{not json", good[1], "", "garbage", good[2], good[3][:25]]))
    with caplog.at_level(logging.WARNING, logger="hqa.schemas.run_folder"):
        rows = read_rows(path)
    assert [r["id"] for r in rows] == ["q0", "q1", "q2"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "3 unreadable lines skipped: lines 2, 5, 7" in warnings[0] and str(path) in warnings[0]


def test_a_torn_last_line_is_repaired_on_resume(tmp_path, caplog):
    out = tmp_path / "predictions.jsonl"
    evaluate(_Echo(), _examples(2), out=out)
    complete = out.read_bytes()
    torn = json.dumps({**GOOD, "id": "id2", "question": "q2"})[:40]
    out.write_bytes(complete + torn.encode())  # killed mid-write: no newline, not JSON
    again = _Echo()
    with caplog.at_level(logging.WARNING, logger="hqa.schemas.run_folder"):
        summary = evaluate(again, _examples(4), out=out)
    assert again.asked == ["q2", "q3"] and summary.n == 4 and summary.errors == 0  # the torn question asked again
    text = out.read_text()
    assert text.startswith(complete.decode()) and torn not in text and text.endswith("\n")
    assert [json.loads(line)["id"] for line in text.splitlines()] == ["id0", "id1", "id2", "id3"]  # valid JSONL
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "line 3" in warnings[0] and "removed" in warnings[0], warnings


def test_a_complete_last_row_without_newline_is_kept(tmp_path):
    out = tmp_path / "predictions.jsonl"
    evaluate(_Echo(), _examples(2), out=out)
    out.write_bytes(out.read_bytes().rstrip(b"\n"))
    again = _Echo()
    evaluate(again, _examples(3), out=out)
    assert again.asked == ["q2"]
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["id0", "id1", "id2"]
