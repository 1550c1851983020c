"""Report analyses on hand-built rows whose expected values are computed by hand."""

import json

import pytest

from hqa.errors import DataError
from hqa.metrics import score_all
from hqa.report import (bucket, compare_runs, entity_linking, hop_retrieval, paired_bootstrap, sign_test,
                        source_analysis, sparql_stats, summarize_rows, write_report)


def row(i, gold, final, text=None, kg=None, param=None, **extra):
    trace = {"answers": {"text": text, "kg": kg, "parametric": param, "final": final}}
    trace.update(extra.pop("trace", {}))
    return {"id": f"q{i}", "question": f"question {i}", "gold": gold, "gold_ids": [], "answer": final,
            "trace": trace, "error": None, "scores": score_all(final, gold), "lm_calls": 2, "prompt_tokens": 100,
            "completion_tokens": 10, "tool_calls": 1, "seconds": 0.5, **extra}


ROWS = [
    # q0: all three sources say Paris (correct)            -> bucket "all agree", final correct
    row(0, ["Paris"], "Paris", text="Paris", kg="Paris", param="paris"),
    # q1: text Lyon (wrong), kg Paris (right), memory Paris -> "two agree", final correct
    row(1, ["Paris"], "Paris", text="Lyon", kg="Paris", param="Paris"),
    # q2: text Rome (right), kg Milan, memory Turin         -> "conflict", final wrong (Milan)
    row(2, ["Rome"], "Milan", text="Rome", kg="Milan", param="Turin"),
    # q3: only memory answered, wrongly                     -> "single source", final wrong
    row(3, ["Oslo"], "Bergen", text=None, kg="None", param="Bergen"),
]


def test_per_source_prevalence_precision_recall():
    s = source_analysis(ROWS)["per_source"]
    # text answered q0,q1,q2 (3/4); correct q0,q2 -> precision 2/3, recall 2/4
    assert s["text"] == {"answered": 3, "correct": 2, "prevalence": 0.75, "precision": 0.6667, "recall": 0.5}
    # kg answered q0,q1,q2 ("None" is no answer); correct q0,q1
    assert s["kg"] == {"answered": 3, "correct": 2, "prevalence": 0.75, "precision": 0.6667, "recall": 0.5}
    # memory answered all 4; correct q0,q1
    assert s["parametric"] == {"answered": 4, "correct": 2, "prevalence": 1.0, "precision": 0.5, "recall": 0.5}


def test_agreement_buckets_and_accuracy():
    a = source_analysis(ROWS)["agreement"]
    assert {k: v["count"] for k, v in a.items()} == {"all agree": 1, "two agree": 1, "conflict": 1,
                                                     "single source": 1, "no source": 0}
    assert a["all agree"]["accuracy"] == 1.0 and a["conflict"]["accuracy"] == 0.0 and a["no source"]["accuracy"] is None
    assert bucket(["The Eiffel Tower", "eiffel tower"]) == "all agree"


def test_hop_retrieval_h1_h2():
    decomposition = [{"question": "year?", "answers": ["1812"]}, {"question": "who?", "answers": ["James Madison"]}]
    hit_both = {"hops": [{"kept": [{"text": "Citibank was founded in 1812."}]},
                         {"kept": [{"text": "James Madison was president from 1809 to 1817."}]}]}
    hit_first = {"hops": [{"kept": [{"text": "founded 1812 in New York"}]}, {"kept": [{"text": "no answer here"}]}]}
    rows = [row(0, ["James Madison"], "x", trace=hit_both, decomposition=decomposition),
            row(1, ["James Madison"], "x", trace=hit_first, decomposition=decomposition),
            row(2, ["x"], "x")]  # no decomposition: not counted
    h = hop_retrieval(rows)
    assert h == {"H1-R": {"n": 2, "value": 1.0}, "H2-R": {"n": 2, "value": 0.5}}


def test_entity_linking_and_sparql_rates():
    rows = [row(0, ["a"], "a", gold_entities=["Q1"], trace={"entities": [{"id": "Q1"}], "sparql": [
                {"error": None, "rows": [{"x": "1"}]}, {"error": "malformed", "rows": []}]}),
            row(1, ["a"], "a", gold_entities=["Q2"], trace={"tool_calls": [{"entities": [{"id": "Q3"}]}], "sparql": [
                {"error": None, "rows": []}]}),
            row(2, ["a"], "a", gold_entities=["Q4"]),
            row(3, ["a"], "a")]
    assert entity_linking(rows) == {"n": 3, "with_links": 2, "accuracy": 0.3333}
    # 3 queries: 2 without error (2/3), 1 with rows (1/3)
    assert sparql_stats(rows) == {"issued": 3, "success_rate": 0.6667, "non_empty_rate": 0.3333}


def test_sign_test_and_bootstrap():
    # 8 wins, 1 loss: p = 2 * (C(9,0) + C(9,1)) / 2**9 = 2 * 10 / 512
    assert sign_test(8, 1) == pytest.approx(0.0390625)
    assert sign_test(0, 0) == 1.0 and sign_test(5, 5) == 1.0
    diffs = [1.0] * 8 + [-1.0] + [0.0] * 3
    lo, hi = paired_bootstrap(diffs, seed=3)
    assert lo <= sum(diffs) / len(diffs) <= hi


def test_compare_runs_and_report_files(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    rows_a = [row(i, ["x"], "y") for i in range(9)]
    rows_b = [row(i, ["x"], "x") for i in range(8)] + [row(8, ["x"], "y")]
    rows_b[0] = row(0, ["x"], "y")
    rows_a[0] = row(0, ["x"], "x")  # A wins q0, B wins q1..q7 -> 7 wins vs 1 loss, q8 tie
    for folder, rows in ((a, rows_a), (b, rows_b)):
        (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = compare_runs(a, b, metric="em")
    assert (res["n"], res["b_better"], res["a_better"], res["ties"]) == (9, 7, 1, 1)
    assert res["sign_test_p"] == pytest.approx(2 * (1 + 8) / 2**8, abs=1e-6)  # rounded to 6 places
    assert res["diff"] == pytest.approx(6 / 9, abs=1e-4)
    summary = write_report(a)
    assert summary["metrics"]["em"] == pytest.approx(1 / 9, abs=1e-4)
    for name in ("summary.json", "summary.md", "metrics.png", "agreement.png"):
        assert (a / name).exists()
    with pytest.raises(DataError):
        summarize_rows([])
    with pytest.raises(DataError, match="share no question ids"):
        (tmp_path / "c").mkdir()
        (tmp_path / "c" / "predictions.jsonl").write_text(json.dumps(row(99, ["x"], "x")) + "\n")
        compare_runs(a, tmp_path / "c")


def test_cost_mean_and_reference():
    s = summarize_rows(ROWS)
    assert s["cost"]["tool_calls"] == 1.0 and s["humaniq_reference_gpt4"]["tool_calls"] == 5.0
    assert s["metrics"]["recall"] == 0.5


@pytest.mark.real_lm
def test_cli_evaluate_resumes_and_reports(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env["HQA_PATHS__ARTIFACTS"] = str(tmp_path / "art")

    def run(*args):
        return subprocess.run([sys.executable, "-m", "hqa.cli", *args], capture_output=True, text=True, env=env,
                               timeout=600)

    out = tmp_path / "run1"
    first = run("evaluate", "--program", "closedbook", "--dataset", "mintaka", "--limit", "3", "--out", str(out))
    assert first.returncode == 0, first.stderr
    lines = (out / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 3 and (out / "summary.md").exists()
    before = json.loads((out / "summary.json").read_text())
    second = run("evaluate", "--program", "closedbook", "--dataset", "mintaka", "--limit", "3", "--out", str(out))
    assert second.returncode == 0, second.stderr
    assert (out / "predictions.jsonl").read_text().splitlines() == lines  # resumed: nothing re-run
    assert json.loads((out / "summary.json").read_text())["metrics"] == before["metrics"]
    cmp_ = run("report", "compare", str(out), str(out), "--json")
    assert cmp_.returncode == 0 and json.loads(cmp_.stdout)["diff"] == 0.0
