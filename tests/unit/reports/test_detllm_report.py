"""DIVKNOWQA's tables over hqa runs (hqa/reports/divknowqa.py, ``hqa report divknowqa``): arms named as Table 3 /
Table 6 name them from the options a run was evaluated with, Table 5's QID / QID+REL / QID* from the traces, and
Table 4's overlap with a closed-book run.  Expected values are worked out by hand in the comments."""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest
from conftest import KeepOrderReranker, ScriptedLinker, ScriptedSparql
from dspy.utils import DummyLM

from hqa.scoring.metrics import score_all
from hqa.reports.divknowqa import arm_name, closed_book_overlap, divknowqa_markdown, divknowqa_tables, sparql_linking


def cand(qid, mention):
    return {"id": qid, "label": qid, "description": "", "score": 1.0, "mention": mention}


def row(i, gold, answer, hops=(), gold_ids=(), gold_entities=(), program="detllm", decomposition=None):
    return {"id": f"q{i}", "question": f"question {i}", "gold": list(gold), "gold_ids": list(gold_ids),
            "dataset": "compmix/test", "gold_entities": list(gold_entities), "decomposition": decomposition,
            "answer": answer, "error": None, "scores": score_all(answer, list(gold), list(gold_ids)),
            "trace": {"program": program, "answers": {"final": answer}, "hops": list(hops)}}


def write_run(folder: Path, rows: list[dict], tag: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    if tag is not None:
        (folder / "predictions.jsonl.run.json").write_text(json.dumps(tag), encoding="utf-8")
    return folder


def hop(linked, kept=()):
    return {"hop": 1, "search_query": "s", "query_entity": "e", "linked_entities": linked, "kept": list(kept)}


SPARQL_HIT = {"source": "sparql", "text": "x=Africa (Q15)",
              "meta": {"query": "SELECT ?x WHERE { wd:Q1000 wdt:P30 ?x }"}}
SPARQL_MISS = {"source": "sparql", "text": "x=Asia (Q48)",
               "meta": {"query": "SELECT ?x WHERE { wd:Q1000 wdt:P31 ?x }"}}

TABLE5_ROWS = [
    # q0: top pick of mention "Gabon" is gold Q1000, its SPARQL returned the gold answer -> QID and QID+REL
    row(0, ["Africa"], "Africa", [hop([cand("Q1000", "Gabon"), cand("Q7", "Gabon")], [SPARQL_HIT])],
        gold_entities=["Q1000"]),
    # q1: top pick gold, but its query returned another value -> QID only
    row(1, ["Africa"], "Asia", [hop([cand("Q1000", "Gabon")], [SPARQL_MISS])], gold_entities=["Q1000"]),
    # q2: gold Q1000 is the second candidate of "Gabon" (not picked) -> QID*
    row(2, ["Africa"], "x", [hop([cand("Q7", "Gabon"), cand("Q1000", "Gabon")])], gold_entities=["Q1000"]),
    # q3: gold not among the candidates -> nothing
    row(3, ["Africa"], "x", [hop([cand("Q7", "Gabon")])], gold_entities=["Q1000"]),
    # q4: no gold entities -> not scored
    row(4, ["Africa"], "x", [hop([cand("Q7", "Gabon")])]),
]


def test_table5_qid_qid_rel_qid_star_from_traces():
    # scored: q0..q3 (n=4); QID q0,q1 = 50 %; QID+REL q0 = 25 %; QID* q2 = 25 %
    assert sparql_linking(TABLE5_ROWS) == {"n": 4, "QID": 50.0, "QID+REL": 25.0, "QID*": 25.0}
    assert sparql_linking(TABLE5_ROWS[4:]) is None


@pytest.mark.parametrize("program,kwargs,name", [
    ("detllm", {}, "DETLLM"),
    ("detllm", {"sparql": False}, "w/o SPARQL Text(Dense)-KB(Sparse)"),
    ("detllm", {"sources": "unified", "text_retriever": "sparse"}, "w/ SPARQL Text-KB(Sparse)"),
    ("detllm", {"sources": "unified", "sparql": False}, "w/o SPARQL Text-KB(Dense)"),
    ("detllm", {"text_retriever": "sparse"}, "w/ SPARQL Text(Sparse)-KB(Sparse)"),
    ("detllm", {"oracle": "all", "samples": 1}, "Oracle_All"),
    ("detllm", {"oracle": "hop2"}, "Oracle_hop2"),
    ("closedbook", {}, "Closed Book"),
])
def test_arms_are_named_as_divknowqa_names_them(program, kwargs, name):
    assert arm_name(program, kwargs) == name


def test_table4_overlap_with_the_closed_book_run(tmp_path):
    gold = [["Paris"], ["Rome"], ["Oslo"], ["Lima"]]
    det = write_run(tmp_path / "det", [row(i, g, ans) for i, (g, ans) in enumerate(zip(gold, ["Paris", "Rome", "x",
                                                                                               "x"]))],
                    {"program": "detllm", "dataset": "bamboogle"})
    cb = write_run(tmp_path / "cb", [row(i, g, ans, program="closedbook")
                                     for i, (g, ans) in enumerate(zip(gold, ["Paris", "x", "Oslo", "x"]))],
                   {"program": "closedbook", "dataset": "bamboogle"})
    # DETLLM right on q0,q1; closed book on q0,q2: both q0 -> 1/2 = 50 %; either q0,q1,q2 -> 3/4 = 75 %
    t = closed_book_overlap(det, cb)
    assert (t["n"], t["both"]) == (4, 1)
    assert (t["closed_book_share_of_detllm_correct"], t["either_correct_share"]) == (50.0, 75.0)
    result = divknowqa_tables([det], closed_book=cb)
    md = divknowqa_markdown(result)
    assert "Table 4" in md and "50.8" in md and "| DETLLM |" in md and "| Closed Book |" in md


def test_arms_from_real_detllm_runs_line_up_with_hop_retrieval(tmp_path):
    """Two arms of the real program evaluated with scripted replies: the tag names the arm, H1-R/H2-R come from
    the kept evidence, the oracle arm retrieves the gold sub-answers at every hop."""
    from hqa.config import load_settings
    from hqa.data.datasets import load_dataset
    from hqa.jobs.evaluate import evaluate
    from hqa.programs.detllm import DETLLM
    from hqa.toolbox import Toolbox

    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(tmp_path / "a"))
    detllm_rep_tb = Toolbox(settings, dense=lambda q, k=5: [], bm25=lambda q, k=5: [], reranker=KeepOrderReranker(),
                        linker=ScriptedLinker({}), sparql=ScriptedSparql())
    examples = [r.to_example() for r in load_dataset("bamboogle", limit=2)]
    plan = {"rationale": "r", "search_query": "s", "query_entity": "None", "sparql": "None"}
    replies = [plan, plan, {"rationale": "r", "answer": "nothing"}] * 2
    runs = []
    for kwargs in ({"samples": 1}, {"samples": 1, "oracle": "all"}):
        out = tmp_path / json.dumps(kwargs).replace('"', "").replace(" ", "")
        with dspy.context(lm=DummyLM(list(replies)), adapter=dspy.ChatAdapter()):
            evaluate(DETLLM(toolbox=detllm_rep_tb, **kwargs), examples, out=out / "predictions.jsonl",
                     tag={"program": "detllm", "dataset": "bamboogle", "program_kwargs": kwargs})
        runs.append(out)
    arms = divknowqa_tables(runs)["arms"]
    assert [a["arm"] for a in arms] == ["DETLLM", "Oracle_All"]
    assert [(a["H1-R"], a["H2-R"]) for a in arms] == [(0.0, 0.0), (100.0, 100.0)]  # nothing retrieved vs the gold


def test_cli_report_divknowqa(tmp_path, capsys):
    from hqa.cli.entry import main

    run = write_run(tmp_path / "r", TABLE5_ROWS, {"program": "detllm", "dataset": "compmix/test",
                                                  "program_kwargs": {"sources": "unified"}})
    assert main(["report", "divknowqa", str(run)]) == 0
    out = capsys.readouterr().out
    assert "| w/ SPARQL Text-KB(Dense) | compmix/test | 5 |" in out and "Table 5" in out
    assert main(["report", "divknowqa", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["arms"][0]["table5"]["QID*"] == 25.0
