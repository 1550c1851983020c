"""The results table over run folders written here: headline metric per benchmark, paired tests, the published
value beside a row, and every export (issue 54)."""

from __future__ import annotations

import json

import pytest

from hqa.errors import DataError
from hqa.reports.results import FORMATS, render, results_table
from hqa.scoring.metrics import score_all


def _folder(tmp_path, name, dataset, program, answers, golds, info=None):
    folder = tmp_path / name
    folder.mkdir()
    rows = []
    for i, (answer, gold) in enumerate(zip(answers, golds)):
        rows.append({"id": f"q{i}", "question": f"Q{i}?", "answer": answer, "gold": gold, "gold_ids": [],
                     "dataset": dataset, "trace": {"program": program}, "error": None, "prompt_tokens": 100,
                     "cached_prompt_tokens": 0, "completion_tokens": 10, "tool_calls": 2, "lm_calls": 1,
                     "seconds": 0.5 + i, "scores": score_all(answer, gold, [])})
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "predictions.jsonl.run.json").write_text(json.dumps({"program": program, "dataset": dataset}))
    if info:
        (folder / "run-info.json").write_text(json.dumps(info))
    return folder


def test_rows_paired_against_the_baseline_with_the_papers_value(tmp_path):
    gold = [["Paris"], ["Rome"], ["Oslo"], ["Bern"]]
    price = {"model": "m", "prompt": 1.0, "cached_prompt": 1.0, "completion": 10.0}
    base = _folder(tmp_path, "cb", "humaniq-compmix", "closedbook", ["Paris", "x", "x", "x"], gold,
                   {"lm": {"provider": "openai", "model": "gpt-4-0314"}, "price": price, "command": "hqa evaluate …"})
    hqa = _folder(tmp_path, "hq", "humaniq-compmix", "humaniq", ["Paris", "Rome", "Oslo", "x"], gold)
    table = results_table([hqa, base], baseline="closedbook")
    by = {r["program"]: r for r in table["rows"]}
    assert by["closedbook"]["value"] == 0.25 and by["humaniq"]["value"] == 0.75 and by["humaniq"]["metric"] == "hits1"
    assert by["closedbook"]["cost_per_q"] == pytest.approx((100 * 1 + 10 * 10) / 1e6)
    assert by["closedbook"]["p50_seconds"] == 2.0 and by["closedbook"]["tool_calls_per_q"] == 2.0
    assert by["humaniq"]["discordant"] == [0, 2] and by["humaniq"]["p"] == 0.5  # 2 · (1/2)^2
    assert by["closedbook"]["published"] == 0.585 and by["closedbook"]["settings_differ"] == [
        "a sample of 200 questions there, 4 here", "188 of HumanIQ's 199 listed questions"]  # the same LM: no flag
    assert by["humaniq"]["published"] == 0.655  # HQA-GPT-4, Table 3
    assert "other LM (gpt-4-0314)" in by["humaniq"]["settings_differ"]
    with pytest.raises(DataError, match="matches no row"):
        results_table([hqa], baseline="nobody")


def test_qald_rows_take_macro_f1_qald_and_a_permutation_test(tmp_path):
    gold = [["A", "B"], ["C"], ["D"]]
    a = _folder(tmp_path, "a", "qald10", "closedbook", ["A", "x", "x"], gold)
    b = _folder(tmp_path, "b", "qald10", "humaniq", ["A | B", "C", "x"], gold)
    table = results_table([a, b], baseline="closedbook")
    row = next(r for r in table["rows"] if r["program"] == "humaniq")
    # P = (1 + 1 + 0) / 3, R = (1 + 1 + 0) / 3 → F = 2/3; baseline P = (1+0+0)/3, R = (0.5+0+0)/3 → F = 2/9
    assert row["metric"] == "qald_f1" and row["value"] == pytest.approx(0.6667, abs=1e-4)
    assert row["test"] == "paired permutation" and 0 < row["p"] <= 1


def test_every_format_renders_and_latex_and_html_escape(tmp_path):
    gold = [["R&D_%"], ["<b>"]]
    folder = _folder(tmp_path, "x", "bamboogle", "closedbook", ["R&D_%", "<b>"], gold,
                     {"command": "hqa evaluate --program closedbook <&>"})
    table = results_table([folder])
    for name in FORMATS:
        assert render(table, name, "t")
    assert r"\&" in render(table, "latex") or "&" not in render(table, "latex").split("\\midrule")[1].replace(" & ", "")
    page = render(table, "html", "t")
    assert "<&>" not in page and "&lt;&amp;&gt;" in page
    (record,) = json.loads(render(table, "eee"))
    assert {"schema_version", "evaluation_id", "retrieved_timestamp", "source_metadata", "model_info", "eval_library",
            "evaluation_results"} <= set(record)
    result = record["evaluation_results"][0]
    assert result["score_details"]["score"] == 1.0 and result["metric_config"]["lower_is_better"] is False
    assert all(isinstance(v, str) for v in result["generation_config"]["additional_details"].values())


def test_pivots_break_each_row_down_by_benchmark_and_by_error_category(tmp_path):
    from hqa.reports.errors import ERROR_CATEGORIES
    from hqa.reports.results import pivot_markdown

    gold = [["Paris", "Lyon"], ["Rome"], ["Oslo"]]
    folder = _folder(tmp_path, "p", "humaniq-compmix", "closedbook", ["Paris", "x", "Oslo"], gold)
    table = results_table([folder])
    per_bench = pivot_markdown(table, "benchmark").splitlines()
    assert per_bench[0].startswith("| # | program | benchmark | n | Hits@1")
    (line,) = [x for x in per_bench[2:] if "closedbook" in x]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3] == "3" and float(cells[4]) == pytest.approx(2 / 3, abs=1e-3)  # n and Hits@1 of the row's rows
    # QALD's macro F1 over macro P = (1 + 0 + 1) / 3 and R = (1/2 + 0 + 1) / 3
    assert float(cells[5]) == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5), abs=1e-3)
    errors = pivot_markdown(table, "errors").splitlines()
    assert [c.strip() for c in errors[0].strip("|").split("|")][3:] == list(ERROR_CATEGORIES)
    counts = [c.strip() for c in errors[2].strip("|").split("|")][3:]
    assert sum(int(c) for c in counts) <= 1  # one wrong answer at most in one category
    with pytest.raises(DataError, match="unknown pivot"):
        pivot_markdown(table, "nope")
