"""``hqa batch``: questions without gold from JSONL/CSV into a resumable JSONL of answers and traces."""

from __future__ import annotations

import json

import dspy
import pytest
from lmkit import HeardLM

from hqa.jobs.batch import read_questions, run_batch
from hqa.cli.entry import main
from hqa.errors import DataError
from hqa.programs.closedbook import ClosedBook

ANSWERS = {"Animal Farm": {"answer": "George Orwell"}, "Gabon": {"answer": "Libreville"},
           "Alien": {"answer": "Ridley Scott"}}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_reads_jsonl_and_csv(tmp_path):
    j = write_jsonl(tmp_path / "q.jsonl", [{"question": "Who wrote Animal Farm?"}, {"id": "g", "question": " Gabon? "}])
    c = tmp_path / "q.csv"
    c.write_text("id,question\n,Who wrote Animal Farm?\nx,\"Capital of Gabon, please?\"\n", encoding="utf-8")
    assert read_questions(j) == [{"id": "row-1", "question": "Who wrote Animal Farm?"}, {"id": "g", "question": "Gabon?"}]
    assert read_questions(c) == [{"id": "row-1", "question": "Who wrote Animal Farm?"},
                                 {"id": "x", "question": "Capital of Gabon, please?"}]


@pytest.mark.parametrize("name,content,reason", [
    ("q.txt", b"Who?\n", "must be .jsonl or .csv"),
    ("q.jsonl", b'{"question": "a"}\n{"question": \n', "q.jsonl:2: not JSON"),
    ("q.jsonl", b'{"question": ""}\n', "missing or empty"),
    ("q.jsonl", b'["a"]\n', "expected an object"),
    ("q.jsonl", b'{"id": 1, "question": "a"}\n{"id": "1", "question": "b"}\n', "duplicate id '1'"),
    ("q.jsonl", b'{"question": "caf\xe9"}\n', "is not UTF-8"),
    ("q.csv", b"text\nWho?\n", "needs a 'question' column"),
    ("q.jsonl", b"\n\n", "has no questions"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, name, content, reason):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError, match=reason.replace("(", r"\(")):
        read_questions(path)
    out = tmp_path / "out.jsonl"
    assert main(["batch", str(path), "--out", str(out), "--program", "closedbook"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hqa: error:") and err.count("\n") == 1 and not out.exists()


def test_answers_traces_and_resume(tmp_path):
    src = write_jsonl(tmp_path / "q.jsonl", [{"question": "Who wrote Animal Farm?"},
                                             {"question": "Capital of Gabon?"}, {"question": "Who directed Alien?"}])
    out = tmp_path / "out.jsonl"
    questions = read_questions(src)
    lm = HeardLM(ANSWERS)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        summary = run_batch(ClosedBook(), questions[:2], out)  # "interrupted" after two questions
        assert summary.n == 2 and len(lm.heard) == 2
        summary = run_batch(ClosedBook(), questions, out)  # the rerun asks only the third
    assert len(lm.heard) == 3 and summary.n == 3
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["answer"]) for r in rows] == [("row-1", "George Orwell"), ("row-2", "Libreville"),
                                                      ("row-3", "Ridley Scott")]
    assert all(r["trace"]["program"] == "closedbook" and r["error"] is None for r in rows)


def test_failed_question_is_asked_again(tmp_path):
    src = write_jsonl(tmp_path / "q.jsonl", [{"id": "a", "question": "Who wrote Animal Farm?"}])
    out = tmp_path / "out.jsonl"
    dead = dspy.LM("openai/dead", api_base="http://127.0.0.1:9/v1", api_key="x", num_retries=0, cache=False)
    with dspy.context(lm=dead, adapter=dspy.ChatAdapter()):
        first = run_batch(ClosedBook(), read_questions(src), out)
    assert first.errors == 1
    lm = HeardLM(ANSWERS)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        second = run_batch(ClosedBook(), read_questions(src), out)
    assert second.errors == 0 and second.rows and len(lm.heard) == 1
    last = [json.loads(line) for line in out.read_text().splitlines()][-1]
    assert last["answer"] == "George Orwell" and last["error"] is None
