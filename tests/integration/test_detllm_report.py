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


def test_reproduce_script_runs_every_paper_arm_with_valid_options(tmp_path):
    """scripts/reproduce-detllm with a recording stand-in for ``hqa``: each dataset gets every Table 3 arm (Bamboogle
    also Table 6's oracles), a closed-book run, and one ``report divknowqa`` over them; every kwargs is a valid
    DETLLM configuration that the report names as the paper does."""
    import os
    import shlex
    import subprocess

    from hqa.artifacts.store import check_program_kwargs
    from hqa.programs.detllm import DETLLM

    log = tmp_path / "calls.txt"
    stub = tmp_path / "hqa-stub"
    stub.write_text(f'#!/usr/bin/env bash\nprintf "%q " "$@" >> {log}\necho >> {log}\n')
    stub.chmod(0o755)
    script = Path(__file__).resolve().parents[2] / "scripts" / "reproduce-detllm"
    subprocess.run([str(script), "--limit", "2", "--out", str(tmp_path / "out")], check=True, capture_output=True,
                   env={**os.environ, "HQA": str(stub)})
    calls = [shlex.split(line) for line in log.read_text().splitlines()]
    by_dataset: dict[str, list[str]] = {}
    for argv in calls:
        if argv[0] != "evaluate":
            continue
        args = dict(zip(argv[1::2], argv[2::2]))
        assert args["--limit"] == "2"
        kwargs = json.loads(args.get("--program-kwargs", "{}"))
        if args["--program"] == "detllm":
            check_program_kwargs("detllm", kwargs, "test")
            DETLLM(**kwargs)
        by_dataset.setdefault(args["--dataset"], []).append(arm_name(args["--program"], kwargs))
    table3 = {"DETLLM", "Closed Book"} | {f"{s} {b}" for s in ("w/o SPARQL", "w/ SPARQL")
                                         for b in ("Text-KB(Sparse)", "Text-KB(Dense)", "Text(Sparse)-KB(Sparse)")}
    table3.add("w/o SPARQL Text(Dense)-KB(Sparse)")
    assert set(by_dataset["compmix/test"]) == table3
    assert set(by_dataset["bamboogle"]) == table3 | {"Oracle_All", "Oracle_hop1", "Oracle_hop2"}
    reports = [argv for argv in calls if argv[:2] == ["report", "divknowqa"]]
    assert len(reports) == 2 and all("--closed-book" in argv and len(argv) >= 12 for argv in reports)
