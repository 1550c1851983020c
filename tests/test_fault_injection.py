"""Faults with real processes on 127.0.0.1: a SPARQL server killed mid-run, an LM server that is down, a full
disk while saving, Ctrl-C during an evaluation."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

from hqa.errors import ArtifactError, EndpointError, HQAError
from hqa.evaluate import evaluate
from hqa.retrievers.registry import Toolbox, use_toolbox
from hqa.servers import free_port, start_oxigraph


def start_oxigraph_at(store: Path, port: int) -> subprocess.Popen:
    return start_oxigraph(store, port)[0]


class KeepOrder:
    kind = "test"

    def rerank(self, query, items, k):
        return items[:k]


def test_sparql_server_killed_mid_run_then_resumed(settings_for, tmp_path):
    from hqa.optimize.compile import load_split
    from hqa.programs.simple import SimpleHybrid

    port = free_port()
    store = settings_for().kg_path
    server = start_oxigraph_at(store, port)
    settings = settings_for(kg_kind="sparql", kg_endpoint=f"http://127.0.0.1:{port}/query", kg_timeout=2.0)
    tb = Toolbox(settings, dense=lambda q, k=5: [], bm25=lambda q, k=5: [], reranker=KeepOrder())
    tb.sparql.retries, tb.sparql.backoff = 1, 0.05
    use_toolbox(tb, name="fault")
    examples = load_split("compmix/test", 6)
    out = tmp_path / "run" / "predictions.jsonl"
    killed = {}

    def kill_after_first(row):
        if not killed:
            server.terminate()
            server.wait(timeout=10)
            killed["after"] = row["id"]

    lm = DummyLM([{"answer": "x"}] * 100)
    try:
        with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
            summary = evaluate(SimpleHybrid(toolbox="fault"), examples, out=out, on_row=kill_after_first)
    finally:
        if server.poll() is None:
            server.kill()
    assert summary.n == 6 and len(out.read_text().splitlines()) == 6  # nothing lost, no crash
    assert all(not r.get("error") or "Error" in r["error"] for r in summary.rows)
    after_kill = [r for r in summary.rows if r["id"] != killed["after"]]
    errors = [q["error"] for r in after_kill for q in r["trace"].get("sparql", [])]
    assert errors and all(e and "unreachable" in e for e in errors)  # recorded as observations
    server = start_oxigraph_at(store, port)
    try:
        with dspy.context(lm=DummyLM([{"answer": "x"}] * 100), adapter=dspy.ChatAdapter()):
            again = evaluate(SimpleHybrid(toolbox="fault"), examples, out=out)
    finally:
        server.kill()
    from hqa.evaluate import read_rows

    redo = sum(1 for r in summary.rows if r.get("error") or r.get("degraded"))
    assert redo >= 1  # at least the questions answered while the endpoint was down
    # completed rows were not redone; only failed or degraded ones were asked again, now with the KG back
    assert again.n == 6 and len(out.read_text().splitlines()) == 6 + redo
    final = read_rows(out)
    assert len(final) == 6 and not any(r.get("error") or r.get("degraded") for r in final)


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


def test_lm_server_down_is_one_clear_line(tmp_path):
    from hqa.lm import check_server

    port = free_port()
    with pytest.raises(EndpointError, match=f"127.0.0.1:{port}"):
        check_server(f"http://127.0.0.1:{port}/v1", timeout=2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    proc = subprocess.run([sys.executable, "-m", "hqa.cli", "ask", "--program", "closedbook", "--lm",
                           "openai_compatible", "--api-base", f"http://127.0.0.1:{port}/v1", "--model", "x", "Hi?"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("hqa: error: LM server at")


def test_disk_full_while_saving_keeps_the_previous_artifact(tmp_path, monkeypatch):
    from hqa.optimize.artifacts import read_artifact_manifest, save_artifact
    from hqa.programs.closedbook import ClosedBook

    dest = save_artifact(ClosedBook(), tmp_path / "cb", {"program": "closedbook", "program_kwargs": {}})
    before = read_artifact_manifest(dest)

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ArtifactError, match="No space left on device"):
        save_artifact(ClosedBook(cot=True), dest, {"program": "cot", "program_kwargs": {}})
    monkeypatch.undo()
    assert read_artifact_manifest(dest) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cb"]


def test_disk_full_while_appending_rows(tmp_path, monkeypatch):
    import builtins

    examples = [dspy.Example(id=f"id{i}", question=f"q{i}", answers=["a"]).with_inputs("question") for i in range(3)]

    class Echo(dspy.Module):
        def forward(self, question):
            return dspy.Prediction(answer="a")

    out = tmp_path / "p.jsonl"
    evaluate(Echo(), examples[:1], out=out)
    real_open = builtins.open

    def full_open(path, mode="r", *a, **k):
        if str(path) == str(out) and "a" in mode:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", full_open)
    with pytest.raises(HQAError, match="No space left on device"):
        evaluate(Echo(), examples, out=out)
    monkeypatch.undo()
    assert len(out.read_text().splitlines()) == 1  # the row written before is intact


@pytest.mark.real_lm
def test_ctrl_c_during_evaluate_then_resume(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env["HQA_LM__CACHE"] = "false"
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "hqa.cli", "evaluate", "--program", "closedbook", "--dataset", "compmix/test",
           "--limit", "40", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    rows = out / "predictions.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (not rows.exists() or len(rows.read_text().splitlines()) < 3):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "hqa: interrupted" in err and "Traceback" not in err
    lines = rows.read_text().splitlines()
    assert 3 <= len(lines) < 40 and all(json.loads(line)["id"] for line in lines)  # only complete lines
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert again.returncode == 0, again.stderr[-2000:]
    final = rows.read_text().splitlines()
    assert len(final) == 40 and final[: len(lines)] == lines  # resumed: earlier rows kept, the rest added
