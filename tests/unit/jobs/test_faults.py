"""Faults injected in process (the unit half of tests/integration/test_faults.py, which has the policy and the faults
of real processes and sockets): unparsable LM replies (DummyLM), a program that raises, a full disk while saving an
artifact or appending rows (patched ``fsync`` / ``open`` / ``os.replace``), a row cut short by a crash, and Ctrl-C
inside an in-process evaluate."""

from __future__ import annotations

import builtins
import errno
import json
import os
import threading
from pathlib import Path

import dspy
import pytest
from conftest import KeepOrderReranker
from dspy.utils import DummyLM
from lmkit import _Echo

from hqa.errors import ArtifactError, HQAError
from hqa.jobs.evaluate import evaluate
from hqa.schemas.run_folder import read_rows
from hqa.retrievers.base import Evidence
from hqa.toolbox import Toolbox


# -- (d) the LM replies with text that matches no output field ------------------------------------------------------
def passages(query, k=5):
    return [Evidence(text="Libreville is the capital of Gabon.", source="text",
                     meta={"id": "p1", "title": "Gabon"})][:k]


@pytest.mark.parametrize("name", ["simple", "closedbook", "static", "cot", "hqa", "latefusion", "detllm", "sscot"])
def test_programs_survive_unparsable_replies(settings_for, name):
    from hqa.programs import build_program

    program = build_program(name, Toolbox(settings_for(), dense=passages, bm25=passages, reranker=KeepOrderReranker()))
    garbage = DummyLM([{"nonsense": "I cannot follow formats."}] * 400)
    with dspy.context(lm=garbage, adapter=dspy.ChatAdapter()):
        pred = program(question="What is the capital of Gabon?")
    assert isinstance(pred.answer, str)
    trace = pred.trace
    assert trace["question"] == "What is the capital of Gabon?" and "answers" in trace
    recorded = json.dumps(trace, default=str)
    assert trace.get("errors") or "AdapterParseError" in recorded  # the failure is in the trace, not raised
    json.dumps(trace, default=str)  # the row can be written


# -- (e) a full disk ----------------------------------------------------------------------------------------------
ENOSPC = OSError(errno.ENOSPC, "No space left on device")


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


class _HalfWriter:
    """A file whose next write puts half of its data on disk and then fails with ENOSPC."""

    def __init__(self, fh):
        self._fh = fh

    def write(self, data):
        self._fh.write(data[: len(data) // 2])
        self._fh.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()


@pytest.mark.parametrize("where", ["fsync", "program.json", "replace"])
def test_disk_full_while_saving_keeps_the_previous_artifact(tmp_path, monkeypatch, where):
    from hqa.artifacts.store import read_artifact_manifest, save_artifact
    from hqa.programs.closedbook import ClosedBook

    dest = save_artifact(ClosedBook(), tmp_path / "cb", {"program": "closedbook", "program_kwargs": {}})
    before = read_artifact_manifest(dest)
    program_bytes = (dest / "program.json").read_bytes()

    if where == "fsync":
        def fail_fsync(fd):
            raise ENOSPC

        monkeypatch.setattr(os, "fsync", fail_fsync)
    elif where == "program.json":
        real_open = builtins.open

        def full_open(path, mode="r", *args, **kwargs):
            fh = real_open(path, mode, *args, **kwargs)
            return _HalfWriter(fh) if str(path).endswith("program.json") and "w" in mode else fh

        monkeypatch.setattr(builtins, "open", full_open)
    else:
        real_replace = os.replace

        def failing_replace(src, dst):
            if ".tmp-" in str(src):
                raise ENOSPC
            return real_replace(src, dst)

        monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(ArtifactError, match="No space left on device"):
        save_artifact(ClosedBook(cot=True), dest, {"program": "cot", "program_kwargs": {}})
    monkeypatch.undo()
    assert read_artifact_manifest(dest) == before  # the previous artifact, intact and verified
    assert (dest / "program.json").read_bytes() == program_bytes
    assert _leftovers(tmp_path) == []  # no temp or backup folder left behind


class _Gated(dspy.Module):
    """Answers ``first`` at once; every other question waits at ``gate`` (opened once the run has cancelled what was
    queued, or after the first wait runs out, so a broken cancel fails the test instead of hanging it)."""

    def __init__(self, first: str):
        super().__init__()
        self.asked: list[str] = []
        self.first = first
        self.gate = threading.Event()

    def forward(self, question):
        self.asked.append(question)
        if question != self.first and not self.gate.wait(timeout=30):
            self.gate.set()
        return dspy.Prediction(answer="a")


def test_disk_full_while_appending_rows(tmp_path, monkeypatch):
    """A failed append stops the run: the rows already written stay, the queued questions are dropped (only those
    in flight when the write failed ran), and the rerun repairs the half-written line and resumes."""
    import concurrent.futures as cf

    examples = [dspy.Example(id=f"id{i}", question=f"q{i}", answers=["a"]).with_inputs("question") for i in range(20)]
    out = tmp_path / "predictions.jsonl"
    evaluate(_Echo(), examples[:3], out=out)
    written = out.read_text()
    real_open = builtins.open

    def full_open(path, mode="r", *args, **kwargs):
        fh = real_open(path, mode, *args, **kwargs)
        return _HalfWriter(fh) if str(path) == str(out) and "a" in mode else fh

    program = _Gated(first="q3")
    real_cancel, cancelled = cf.Future.cancel, []

    def cancel(fut):  # the gate opens once every queued question of the run (17) has been cancelled
        cancelled.append(fut)
        if len(cancelled) == 17:
            program.gate.set()
        return real_cancel(fut)

    monkeypatch.setattr(builtins, "open", full_open)
    monkeypatch.setattr(cf.Future, "cancel", cancel)
    with pytest.raises(HQAError, match=r"cannot append to .*No space left on device.*rerun resumes"):
        evaluate(program, examples, out=out, threads=2)
    monkeypatch.undo()
    assert out.read_text().startswith(written)  # the rows already written are untouched
    # the queued questions were dropped, not run for nothing: besides q3 (whose row hit the full disk) only the
    # questions the two workers held when it failed ran
    assert "q3" in program.asked and set(program.asked) <= {"q3", "q4", "q5"}
    assert len(read_rows(out)) == 3  # the half-written line is ignored

    again = _Echo()
    summary = evaluate(again, examples, out=out)  # space is back: resume
    assert len(again.asked) == 17 and summary.n == 20 and summary.errors == 0
    rows = read_rows(out)
    assert sorted(r["id"] for r in rows) == sorted(ex.id for ex in examples)
    # the cut line was removed on resume: the file is valid JSONL again, one row per question
    assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines()) == sorted(r["id"] for r in rows)


def test_rows_that_raised_are_retried_on_resume(tmp_path):
    calls = {"n": 0}

    class Flaky(dspy.Module):
        def forward(self, question):
            calls["n"] += 1
            if question == "q1" and calls["n"] <= 2:
                raise ConnectionError("LM server went away")
            return dspy.Prediction(answer="a")

    examples = [dspy.Example(id=f"id{i}", question=f"q{i}", answers=["a"]).with_inputs("question") for i in range(3)]
    out = tmp_path / "p.jsonl"
    first = evaluate(Flaky(), examples, out=out)
    assert first.errors == 1
    second = evaluate(Flaky(), examples, out=out)
    assert second.errors == 0 and calls["n"] == 4  # only the failed question ran again


def test_row_cut_by_a_crash_does_not_swallow_the_next_row(tmp_path):
    examples = [dspy.Example(id=f"id{i}", question=f"q{i}", answers=["a"]).with_inputs("question") for i in range(4)]
    out = tmp_path / "predictions.jsonl"
    evaluate(_Echo(), examples[:2], out=out)
    with open(out, "a", encoding="utf-8") as fh:
        fh.write('{"id": "id2", "question": "q2", "answ')  # killed mid-write
    again = _Echo()
    evaluate(again, examples, out=out)
    assert sorted(again.asked) == ["q2", "q3"]
    assert sorted(r["id"] for r in read_rows(out)) == ["id0", "id1", "id2", "id3"]


def test_ctrl_c_inside_evaluate_stops_promptly(tmp_path):
    """A KeyboardInterrupt in the collecting thread must not run every queued question before leaving."""
    examples = [dspy.Example(id=f"id{i}", question=f"q{i}", answers=["a"]).with_inputs("question") for i in range(50)]
    program = _Echo()

    def interrupt(row):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        evaluate(program, examples, threads=2, out=tmp_path / "p.jsonl", on_row=interrupt)
    assert len(program.asked) <= 4
