"""Evaluation reports (hqa.reports, hqa.scoring.stats): every analysis on rows whose expected values are computed by hand in the comments.

Three kinds of input: hand-built predictions rows; rows produced by ``hqa.jobs.evaluate.evaluate`` running the real DETLLM
and HQA agent programs with DummyLM-scripted replies over fake toolboxes (so the report reads real trace shapes);
and one end-to-end CLI run with the embedded LM (``real_lm``).
"""

from __future__ import annotations

import json

import pytest


# -- end to end with the embedded LM -------------------------------------------------------------------------------
@pytest.mark.real_lm
def test_cli_evaluate_resumes_and_reports(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env["HQA_PATHS__ARTIFACTS"] = str(tmp_path / "art")  # fresh DSPy cache too

    def run(*args):
        return subprocess.run([sys.executable, "-m", "hqa.cli", *args], capture_output=True, text=True, env=env,
                              timeout=600, cwd=tmp_path)

    out = tmp_path / "run1"
    first = run("evaluate", "--program", "closedbook", "--dataset", "mintaka", "--limit", "3", "--out", str(out))
    assert first.returncode == 0, first.stderr
    lines = (out / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 3 and "## Answer metrics" in first.stdout
    for name in ("summary.json", "summary.md", "metrics.png", "agreement.png"):
        assert (out / name).exists()
    before = json.loads((out / "summary.json").read_text())
    assert before["n"] == 3 and before["programs"] == {"closedbook": 3} and before["datasets"] == {"mintaka": 3}
    assert before["entity_linking"] is None  # closed-book links nothing

    second = run("evaluate", "--program", "closedbook", "--dataset", "mintaka", "--limit", "3", "--out", str(out))
    assert second.returncode == 0, second.stderr
    assert (out / "predictions.jsonl").read_text().splitlines() == lines  # resumed: no new rows
    after = json.loads((out / "summary.json").read_text())
    assert {k: after[k] for k in ("n", "metrics", "cost", "sources")} == {k: before[k] for k in
                                                                          ("n", "metrics", "cost", "sources")}

    # a second run on 2 of the questions (LM replies now come from the cache), compared on the shared ids
    out2 = tmp_path / "run2"
    assert run("evaluate", "--program", "closedbook", "--dataset", "mintaka", "--limit", "2",
               "--out", str(out2)).returncode == 0
    cmp_ = run("report", "compare", str(out), str(out2), "--json")
    assert cmp_.returncode == 0, cmp_.stderr
    res = json.loads(cmp_.stdout)
    assert (res["n"], res["only_a"], res["only_b"], res["diff"], res["sign_test_p"]) == (2, 1, 0, 0.0, 1.0)
