"""Evaluation reports (hqa.reports, hqa.scoring.stats): every analysis on rows whose expected values are computed by hand in the comments.

Three kinds of input: hand-built predictions rows; rows produced by ``hqa.jobs.evaluate.evaluate`` running the real DETLLM
and HQA agent programs with DummyLM-scripted replies over fake toolboxes (so the report reads real trace shapes);
and one end-to-end CLI run with the embedded LM (``real_lm``).
"""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest
from conftest import KeepOrderReranker, ScriptedLinker, ScriptedSparql
from dspy.utils import DummyLM

from hqa.errors import DataError
from hqa.jobs.evaluate import evaluate
from hqa.scoring.metrics import score_all
from hqa.reports.compare import compare_markdown, compare_runs
from hqa.reports.retrieval import entity_linking, hop_retrieval, sparql_stats, sscot_stats
from hqa.reports.sources import agree, bucket, source_analysis
from hqa.reports.summary import summarize_rows, write_report
from hqa.scoring.stats import is_correct, paired_bootstrap, sign_test
from hqa.retrievers.base import Evidence
from hqa.toolbox import Toolbox

WD = "http://www.wikidata.org/entity/"


def row(i, gold, final, text=None, kg=None, param=None, gold_ids=(), **extra):
    trace = {"answers": {"text": text, "kg": kg, "parametric": param, "final": final}}
    trace.update(extra.pop("trace", {}))
    return {"id": f"q{i}", "question": f"question {i}", "gold": gold, "gold_ids": list(gold_ids), "answer": final,
            "trace": trace, "error": None, "scores": score_all(final, gold, gold_ids), "lm_calls": 2,
            "prompt_tokens": 100, "completion_tokens": 10, "tool_calls": 1, "seconds": 0.5, **extra}


def write_run(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


ROWS = [
    # q0: all three sources say Paris (correct)              -> "3 agree", final correct
    row(0, ["Paris"], "Paris", text="Paris", kg="Paris", param="paris"),
    # q1: text Lyon (wrong), kg Paris, memory Paris (right)  -> "3 sources, 2 agree", final correct
    row(1, ["Paris"], "Paris", text="Lyon", kg="Paris", param="Paris"),
    # q2: text Rome (right), kg Milan, memory Turin          -> "3 differ", final wrong (Milan)
    row(2, ["Rome"], "Milan", text="Rome", kg="Milan", param="Turin"),
    # q3: only memory answered ("None" is no answer), wrongly -> "single source", final wrong
    row(3, ["Oslo"], "Bergen", text=None, kg="None", param="Bergen"),
]


# -- per-source analysis (HumanIQ Table 5, Figure 4) ------------------------------------------------------------
def test_per_source_re_prec_prev_recall():
    s = source_analysis(ROWS)["per_source"]
    # text answered q0,q1,q2 (re 3/4); correct q0 (Paris), q2 (Rome) -> prec 2/3, recall 2/4; the final answer is
    # the text's only on q0 -> prev 1/4
    assert s["text"] == {"answered": 3, "correct": 2, "re": 0.75, "prec": 0.6667, "prev": 0.25, "recall": 0.5}
    # kg answered q0,q1,q2 ("None" on q3 is no answer); correct q0,q1; final = kg on q0,q1,q2 -> prev 3/4
    assert s["kg"] == {"answered": 3, "correct": 2, "re": 0.75, "prec": 0.6667, "prev": 0.75, "recall": 0.5}
    # memory answered all 4; correct q0,q1; final = memory on q0 ("paris"), q1, q3
    assert s["parametric"] == {"answered": 4, "correct": 2, "re": 1.0, "prec": 0.5, "prev": 0.75, "recall": 0.5}
    # the final answer, for reference: 4 answered, q0,q1 correct
    assert s["final"] == {"answered": 4, "correct": 2, "re": 1.0, "prec": 0.5, "prev": None, "recall": 0.5}


def test_agreement_buckets_and_accuracy():
    res = source_analysis(ROWS)
    a = res["agreement"]
    assert {k: v["count"] for k, v in a.items()} == {"3 agree": 1, "3 sources, 2 agree": 1, "3 differ": 1,
                                                     "2 agree": 0, "2 differ": 0, "single source": 1, "no source": 0}
    # accuracy = final answer correct within the bucket: q0 yes, q1 yes, q2 no, q3 no, empty buckets None
    assert [a[b]["accuracy"] for b in a] == [1.0, 1.0, 0.0, None, None, 0.0, None]
    assert a["3 agree"]["share"] == 0.25
    assert res["sources_seen"] == ["text", "kg", "parametric"] and res["questions_with_several_source_answers"] == 3


def test_agreement_rule():
    assert agree("The Eiffel Tower", "eiffel tower")  # normalised equal (article, case)
    # token F1 of "Barack Hussein Obama" vs "Barack Obama" = 2*(2/3*1)/(2/3+1) = 0.8 -> agree
    assert agree("Barack Hussein Obama", "Barack Obama")
    # "Obama" vs "Barack Obama": F1 = 2*(1*0.5)/1.5 = 0.667 -> disagree
    assert not agree("Obama", "Barack Obama")
    assert bucket([]) == "no source" and bucket(["x"]) == "single source"
    assert bucket(["Paris", "paris"]) == "2 agree" and bucket(["Paris", "Lyon"]) == "2 differ"
    # 3 answers where only one pair agrees
    assert bucket(["Paris", "Lyon", "Paris."]) == "3 sources, 2 agree"
    assert bucket(["Paris", "paris", "PARIS"]) == "3 agree" and bucket(["Paris", "Lyon", "Nice"]) == "3 differ"


def test_correct_rule_accepts_gold_qids():
    assert is_correct("It is Paris, France", ["Paris"])
    assert not is_correct("Parisian", ["Paris"])  # whole tokens only
    # QALD-10 entity answers are QIDs: an answer naming a gold QID is correct
    assert is_correct("Bernhard Riemann (Q42299)", ["Q42299"], ["Q42299"])
    assert not is_correct("Q4229", ["Q42299"], ["Q42299"])
    assert not is_correct(None, ["x"])


# -- retrieval, linking, SPARQL, SS-CoT ---------------------------------------------------------------------------
def test_hop_retrieval_h1_h2():
    decomposition = [{"question": "year?", "answers": ["1812"]}, {"question": "who?", "answers": ["James Madison"]}]
    hit_both = {"hops": [{"kept": [{"text": "Citibank was founded in 1812."}]},
                         {"kept": [{"text": "James Madison was president from 1809 to 1817."}]}]}
    hit_first = {"hops": [{"kept": [{"text": "founded 1812 in New York"}]}, {"kept": [{"text": "no answer here"}]}]}
    rows = [row(0, ["James Madison"], "x", trace=hit_both, decomposition=decomposition),
            row(1, ["James Madison"], "x", trace=hit_first, decomposition=decomposition),
            row(2, ["x"], "x"),  # no decomposition: not counted
            row(3, ["x"], "x", decomposition=decomposition)]  # no per-hop trace (not DETLLM): not counted
    # H1: q0 yes, q1 yes -> 2/2; H2: q0 yes, q1 no -> 1/2
    assert hop_retrieval(rows) == {"H1-R": {"n": 2, "value": 1.0}, "H2-R": {"n": 2, "value": 0.5}}
    # a program that ran only one hop misses hop 2
    one_hop = {"hops": [{"kept": [{"text": "1812"}]}]}
    assert hop_retrieval([row(0, ["x"], "x", trace=one_hop, decomposition=decomposition)])["H2-R"]["value"] == 0.0
    assert hop_retrieval([row(0, ["x"], "x")]) is None


def test_entity_linking_and_sparql_rates():
    rows = [row(0, ["a"], "a", gold_entities=["Q1"], trace={"entities": [{"id": "Q1"}], "sparql": [
                {"error": None, "rows": [{"x": "1"}]}, {"error": "malformed", "rows": []}]}),
            row(1, ["a"], "a", gold_entities=["Q2"], trace={"tool_calls": [{"entities": [{"id": "Q3"}]}], "sparql": [
                {"error": None, "rows": []}]}),
            row(2, ["a"], "a", gold_entities=["Q4"], trace={"hops": [{"linked_entities": [{"id": "Q4"}]}]}),
            row(3, ["a"], "a", gold_entities=["Q5"]),  # linked nothing
            row(4, ["a"], "a")]  # no gold entities: not counted
    # 4 rows with gold entities; linked something: q0,q1,q2; gold among them: q0 (Q1), q2 (Q4, via a DETLLM hop)
    assert entity_linking(rows) == {"n": 4, "with_links": 3, "correct": 2, "accuracy": 0.5}
    # 3 queries: 2 without error (2/3), 1 with rows (1/3); 2 of 5 questions issued any
    s = sparql_stats(rows)
    assert (s["issued"], s["success_rate"], s["non_empty_rate"], s["questions"]) == (3, 0.6667, 0.3333, 2)
    assert s["per_question"] == 0.6 and s["endpoint_unavailable"] == 0
    # a run where no trace links anything (closed-book) has no entity-linking report
    assert entity_linking([row(0, ["a"], "a", gold_entities=["Q1"])]) is None
    assert sparql_stats([row(0, ["a"], "a")]) is None


def test_sscot_chain_statistics():
    trace = {"program": "sscot",
             "chains": [{"chain": "a", "errors": []}, {"chain": "b", "errors": ["malformed"]},
                        {"chain": "c", "errors": ["mask_overflow", "unmasked_triple"]}, {"chain": "d", "errors": []}],
             "fills": [{"mask": "#1", "via": "kg"}, {"mask": "#2", "via": "lm"}], "fallback": None}
    fallback = {"program": "sscot", "chains": [{"chain": "", "errors": ["malformed"], "lm_error": "bad"}],
                "fills": [], "fallback": "recall"}
    s = sscot_stats([row(0, ["a"], "a", trace=trace), row(1, ["a"], "a", trace=fallback), row(2, ["a"], "a")])
    # 5 chains sampled, 2 valid; malformed twice; fills: kg 1, lm 1; one question fell back
    assert s == {"questions": 2, "chains_sampled": 5, "chains_valid": 2, "valid_rate": 0.4,
                 "errors": {"malformed": 2, "mask_overflow": 1, "unmasked_triple": 1}, "lm_parse_failures": 1,
                 "masks_filled": 2, "filled_by": {"kg": 1, "text": 0, "lm": 1}, "fallback_to_recall": 1}
    assert sscot_stats(ROWS) is None


def test_summary_cost_and_reference():
    rows = ROWS + [{**row(9, ["x"], ""), "error": "RuntimeError: boom", "trace": {}, "lm_calls": 0,
                    "prompt_tokens": 0, "completion_tokens": 0, "tool_calls": 0, "seconds": 0.1}]
    s = summarize_rows(rows, title="t")
    # 5 rows; recall: q0,q1 correct -> 2/5; the errored row counts as wrong
    assert (s["n"], s["errors"], s["metrics"]["recall"]) == (5, 1, 0.4)
    # cost: lm_calls (2*4+0)/5 = 1.6; tool_calls 4/5 = 0.8; seconds (0.5*4+0.1)/5 = 0.42
    assert s["cost"] == {"lm_calls": 1.6, "prompt_tokens": 80.0, "cached_prompt_tokens": 0.0, "completion_tokens": 8.0,
                         "tool_calls": 0.8, "seconds": 0.42}
    assert s["humaniq_reference_gpt4"] == {"tool_calls": 5.0, "completion_tokens": 575.0}
    assert s["sources"]["agreement"]["no source"]["count"] == 1  # the errored row
    with pytest.raises(DataError):
        summarize_rows([])


# -- paired comparison --------------------------------------------------------------------------------------------
def test_sign_test_and_bootstrap():
    # 8 wins, 1 loss: p = 2 * (C(9,0) + C(9,1)) / 2**9 = 2 * 10 / 512
    assert sign_test(8, 1) == pytest.approx(0.0390625)
    assert sign_test(1, 8) == sign_test(8, 1)
    # 10 wins, 0 losses: 2 / 1024
    assert sign_test(10, 0) == pytest.approx(2 / 1024)
    assert sign_test(0, 0) == 1.0 and sign_test(5, 5) == 1.0  # capped at 1
    diffs = [1.0] * 8 + [-1.0] + [0.0] * 3
    lo, hi = paired_bootstrap(diffs, seed=3)
    assert lo <= sum(diffs) / len(diffs) <= hi and lo > 0  # 7/12 ≈ 0.58; the CI excludes 0
    assert paired_bootstrap([0.0] * 5) == (0.0, 0.0)
    assert paired_bootstrap(diffs, seed=3) == (lo, hi)  # seeded: reproducible


def test_compare_runs_and_report_files(tmp_path):
    # A wins q0, B wins q1..q7, q8 tie (both wrong); q9 only in A, q10 only in B
    rows_a = [row(0, ["x"], "x")] + [row(i, ["x"], "y") for i in range(1, 10)]
    rows_b = [row(0, ["x"], "y")] + [row(i, ["x"], "x") for i in range(1, 8)] + [row(8, ["x"], "y"),
                                                                               row(10, ["x"], "x")]
    a, b = write_run(tmp_path / "a", rows_a), write_run(tmp_path / "b", rows_b)
    res = compare_runs(a, b, metric="em")
    assert (res["n"], res["b_better"], res["a_better"], res["ties"], res["only_a"], res["only_b"]) == (9, 7, 1, 1, 1, 1)
    # 7 wins vs 1 loss: p = 2 * (C(8,0) + C(8,1)) / 2**8 = 18/256
    assert res["sign_test_p"] == pytest.approx(18 / 256, abs=1e-6)
    # means on the 9 shared: A 1/9, B 7/9; B - A = 6/9
    assert (res["mean_a"], res["mean_b"], res["diff"]) == (0.1111, 0.7778, 0.6667)
    assert res["ci95"][0] <= res["diff"] <= res["ci95"][1]
    md = compare_markdown(res)
    assert "B − A" in md and "0.0703" in md and "1 questions only in A" in md
    summary = write_report(a, title="run A")
    assert summary["metrics"]["em"] == 0.1  # 1 of A's 10 rows
    for name in ("summary.json", "summary.md", "metrics.png", "agreement.png"):
        assert (a / name).stat().st_size > 0
    assert json.loads((a / "summary.json").read_text())["title"] == "run A"
    assert (a / "summary.md").read_text().startswith("# run A")
    assert write_report(a)["title"] == "run A"  # a re-render keeps the title
    with pytest.raises(DataError, match="share no question ids"):
        compare_runs(a, write_run(tmp_path / "c", [row(99, ["x"], "x")]))
    with pytest.raises(DataError, match="unknown metric"):
        compare_runs(a, b, metric="bleu")


def test_cli_report_show_and_compare(tmp_path, capsys):
    from hqa.cli.entry import main

    a = write_run(tmp_path / "a", ROWS)
    b = write_run(tmp_path / "b", [row(i, r["gold"], r["gold"][0]) for i, r in enumerate(ROWS)])  # all correct
    assert main(["report", "show", str(a)]) == 0
    out = capsys.readouterr().out
    assert "Answers per source (HumanIQ Table 5)" in out and "| 3 differ | 1 |" in out
    assert "HumanIQ paper (GPT-4)" in out and "| tool calls | 1.0 | 5.0 |" in out
    assert main(["report", "compare", str(a), str(b), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    # recall A: q0,q1 -> 0.5; B: 1.0; B wins q2,q3 -> p = 2 * 1/4 = 0.5
    assert (res["mean_a"], res["mean_b"], res["b_better"], res["a_better"], res["sign_test_p"]) == (0.5, 1.0, 2, 0,
                                                                                                   0.5)
    assert main(["report", "compare", str(a), str(b), "--metric", "em"]) == 0
    assert "Paired comparison: `em`" in capsys.readouterr().out
    assert main(["report", "show", str(tmp_path / "missing")]) != 0


# -- real programs' traces through evaluate() ------------------------------------------------------------------------
def report_sparql():
    return ScriptedSparql({"wdt:P571": [{"y": "1812-06-16T00:00:00Z"}], "wdt:P36": [{"x": WD + "Q3825"}]},
                          labels={"Q3825": "Libreville", "Q1000": "Gabon"})


def report_linker():
    return ScriptedLinker({"Q857063": "Citibank", "Q324": "Uranus", "Q51807": "Voyager 2", "Q1000": "Gabon"})


PASSAGES = {
    "Citibank founding year": "Citibank was founded in 1812 in New York City.",
    "US president 1812": "James Madison was the fourth president of the United States, 1809 to 1817.",
    "first spacecraft Uranus": "Voyager 2 is the only spacecraft to have visited Uranus.",
    "Voyager 2 launch rocket": "Voyager 2 was launched in August 1977.",
    "capital of Gabon": "Libreville is the capital of Gabon.",
    "Gabon continent": "Gabon is a country on the west coast of Central Africa.",
}


def fake_dense(query, k=5):
    text = PASSAGES.get(query)
    return [Evidence(text=text, source="text", score=1.0, meta={"id": query, "title": query})] if text else []


@pytest.fixture()
def fake_toolbox(tmp_path):
    from hqa.config import load_settings

    # free-text answers: the report is computed from the answers the scripted agent writes
    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(tmp_path),
                             programs_answer_mode="free")
    tb = Toolbox(settings, dense=fake_dense, bm25=lambda q, k=5: [], reranker=KeepOrderReranker(), linker=report_linker(),
                 sparql=report_sparql(), passages=[])
    return tb


def example(qid, question, answers, **extra):
    return dspy.Example(question=question, answers=answers, answer_ids=[], id=qid, **extra).with_inputs("question")


def run_eval(program, examples, replies, out):
    with dspy.context(lm=DummyLM(replies), adapter=dspy.ChatAdapter()):
        return evaluate(program, examples, threads=1, out=out)


def test_detllm_rows_give_hop_retrieval_linking_and_sparql(fake_toolbox, tmp_path):
    from hqa.programs.detllm import DETLLM

    def plan(search, entity, sparql="None"):
        return {"rationale": "r", "search_query": search, "query_entity": entity, "sparql": sparql}

    citi = [{"question": "What year was Citibank founded?", "answers": ["1812"]},
            {"question": "Who was president of the US in 1812?", "answers": ["james madison"]}]
    uranus = [{"question": "What was the first spacecraft that ever approached Uranus?", "answers": ["voyager 2"]},
              {"question": "What rocket was Voyager 2 launched on?", "answers": ["titan iiie-centaur", "titan iiie"]}]
    examples = [example("bamboogle:0", "Who was president when Citibank was founded?", ["james madison"],
                        dataset="bamboogle", decomposition=citi, gold_entities=["Q857063"]),
                example("bamboogle:1", "What rocket launched the first spacecraft to approach Uranus?", ["Titan IIIE"],
                        dataset="bamboogle", decomposition=uranus, gold_entities=["Q999"])]
    replies = [plan("Citibank founding year", "Citibank", "SELECT ?y WHERE { wd:Q857063 wdt:P571 ?y }"),
               plan("US president 1812", "None"), {"rationale": "r", "answer": "James Madison"},
               plan("first spacecraft Uranus", "Uranus", "SELECT BROKEN"),
               plan("Voyager 2 launch rocket", "Voyager 2"), {"rationale": "r", "answer": "Atlas"}]
    out = tmp_path / "detllm" / "predictions.jsonl"
    run_eval(DETLLM(hops=2, k=3, samples=1, toolbox=fake_toolbox), examples, replies, out)
    s = write_report(out.parent)
    # hop 1 kept "founded in 1812" and "Voyager 2 ... Uranus": 2/2; hop 2 kept "James Madison" but not "Titan": 1/2
    assert s["hop_retrieval"] == {"H1-R": {"n": 2, "value": 1.0}, "H2-R": {"n": 2, "value": 0.5}}
    # linked: q0 Citibank (gold Q857063), q1 Uranus + Voyager 2 (gold Q999 not among them) -> 1/2
    assert s["entity_linking"] == {"n": 2, "with_links": 2, "correct": 1, "accuracy": 0.5}
    # two queries: q0's returned a row, q1's was malformed -> success 1/2, non-empty 1/2
    assert (s["sparql"]["issued"], s["sparql"]["success_rate"], s["sparql"]["non_empty_rate"]) == (2, 0.5, 0.5)
    # DETLLM answers from the KG only: q0 kg "1812-06-16" (wrong), q1 none -> kg re 1/2, prec 0
    kg = s["sources"]["per_source"]["kg"]
    assert {k: kg[k] for k in ("answered", "correct", "re", "prec", "recall")} == {
        "answered": 1, "correct": 0, "re": 0.5, "prec": 0.0, "recall": 0.0}
    assert s["sources"]["questions_with_several_source_answers"] == 0
    assert (s["metrics"]["recall"], s["cost"]["lm_calls"], s["programs"]) == (0.5, 3.0, {"detllm": 2})
    md = (out.parent / "summary.md").read_text()
    assert "H2-R" in md and "Entity linking" in md and "Agreement" not in md


def test_agent_rows_give_per_source_answers_and_buckets(fake_toolbox, tmp_path):
    from hqa.programs.humaniq import HumanIQAgent

    def step(tool, args):
        return {"next_thought": "t", "next_tool_name": tool, "next_tool_args": args}

    examples = [example("mintaka:a", "What is the capital of Gabon?", ["Libreville"], gold_entities=["Q1000"]),
                example("mintaka:b", "Which continent is Gabon in?", ["Africa"], gold_entities=["Q1000"])]
    replies = [
        # a: text Libreville, kg Libreville, memory Paris -> "3 sources, 2 agree"; merged Libreville (correct)
        step("GetWikidataID", "Gabon"), step("RunSparql", "SELECT ?x WHERE { wd:Q1000 wdt:P36 ?x }"),
        step("Finish", "Wikipedia_Answer: Libreville, Wikidata_Answer: [Libreville]"),
        {"answer": "Paris"}, {"answer": "Libreville"},
        # b: text Africa, no kg, memory Africa -> "2 agree" (two sources); merged Africa (correct); no entity linked
        step("WikiSearch", "Gabon continent"), {"title": "None", "summary": "No page is relevant."},
        step("Finish", "Wikipedia_Answer: Africa, Wikidata_Answer: [None]"),
        {"answer": "Africa"}, {"answer": "Africa"},
    ]
    out = tmp_path / "agent" / "predictions.jsonl"
    run_eval(HumanIQAgent(toolbox=fake_toolbox), examples, replies, out)
    s = write_report(out.parent)
    src = s["sources"]
    # text 2/2 answered, both correct; kg 1/2 answered, correct; memory 2/2 answered, 1 correct (Africa)
    assert {k: (v["re"], v["prec"], v["recall"]) for k, v in src["per_source"].items()} == {
        "text": (1.0, 1.0, 1.0), "kg": (0.5, 1.0, 0.5), "parametric": (1.0, 0.5, 0.5), "final": (1.0, 1.0, 1.0)}
    assert {b: v["count"] for b, v in src["agreement"].items() if v["count"]} == {"3 sources, 2 agree": 1,
                                                                                     "2 agree": 1}
    # GetWikidataID linked Gabon (Q1000) on a only -> 1/2
    assert s["entity_linking"] == {"n": 2, "with_links": 1, "correct": 1, "accuracy": 0.5}
    assert (s["sparql"]["issued"], s["sparql"]["success_rate"], s["sparql"]["non_empty_rate"]) == (1, 1.0, 1.0)
    # tool calls: a 2 (GetWikidataID, RunSparql), b 1 -> 1.5; LM calls: a 3 steps + memory + merge = 5, b 5 (with
    # WikiSearch's relevant-page LM) -> 5.0
    assert (s["cost"]["tool_calls"], s["cost"]["lm_calls"]) == (1.5, 5.0)
    assert s["hop_retrieval"] is None and s["sscot"] is None
    md = (out.parent / "summary.md").read_text()
    assert "Agreement of the source answers" in md and "| 3 sources, 2 agree | 1 |" in md


def test_trace_records_read_every_part_and_tolerate_malformed_rows():
    from hqa.schemas.trace import Trace, new_trace

    d = new_trace("detllm", "q").to_dict()
    d["entities"] = [{"id": "Q1"}, "Q2", {"id": "not-a-qid"}]
    d["tool_calls"] = [{"tool": "GetWikidataID", "input": "x", "output": "['Q3']", "ms": 1.0,
                        "entities": [{"id": "Q3"}]}, "garbage"]
    d["hops"] = [{"hop": 1, "linked_entities": [{"id": "Q4"}], "kept": [{"text": "a"}], "rationale": "r"}]
    d["sparql"] = [{"query": "ASK {}", "boolean": True}, {"query": "x", "error": "bad", "unavailable": True}]
    d["answers"]["kg"] = "Paris"
    d["chains"] = [{"errors": []}]
    d["from_a_newer_version"] = {"kept": True}
    t = Trace.from_dict(d)
    assert t.linked_ids() == {"Q1", "Q2", "Q3", "Q4"}
    assert [c.tool for c in t.tool_calls] == ["GetWikidataID"] and t.tool_calls[0].entities == [{"id": "Q3"}]
    assert [(q.ok, q.non_empty, q.unavailable) for q in t.sparql] == [(True, True, False), (False, False, True)]
    assert t.answers.kg == "Paris" and t.hops[0].rationale == "r" and t.chains == [{"errors": []}]
    assert t.extras == {"from_a_newer_version": {"kept": True}} and t.unknown_keys() == ["from_a_newer_version"]
    assert t.to_dict()["from_a_newer_version"] == {"kept": True}  # an unknown key is written back, not lost
    assert t.hops[0].to_dict()["rationale"] == "r" and t.tool_calls[0].to_dict()["entities"] == [{"id": "Q3"}]
    # a row from an older version or a damaged file: empty fields, no exception; no hops is not "zero hops"
    for bad in (None, "x", {"answers": "x", "sparql": "x", "hops": "x", "tool_calls": [1, None]}):
        t = Trace.from_dict(bad)
        assert t.linked_ids() == set() and t.sparql == [] and t.answers.final is None and t.hops is None


# -- HumanIQ Table 8: JS distance of generated thoughts to human-written ones ----------------------------------------
def test_thought_divergence_is_table8_per_position():
    import numpy as np

    from hqa.reports.thoughts import HUMANIQ_TABLE8, _mean_jsd, thought_divergence

    vocab = ["search", "query", "label", "answer"]

    def embed_fn(texts):  # a bag-of-words embedding: the same words give the same distribution
        return np.array([[3.0 * t.lower().split().count(w) for w in vocab] for t in texts])

    human = [["search the page", "query wikidata", "label"], ["search wiki", "answer"]]
    hqa = [["search the page", "query wikidata"], ["search wiki", "answer", "answer"]]
    base = [["answer now", "label label"], ["query", "query", "query"]]
    result = thought_divergence(base, hqa, human, embed_fn, max_n=3)
    rows = {r["n"]: r for r in result["rows"]}
    assert list(rows) == ["1", "<=2", "<=3"]
    assert rows["1"]["thoughts"] == [2, 2, 2] and rows["<=3"]["thoughts"] == [5, 5, 5]
    assert rows["1"]["HQA-H"] < rows["1"]["GPT4-H"] and rows["1"]["delta_pct"] > 0
    assert rows["1"]["paper"] == HUMANIQ_TABLE8["1"] == (0.0889, 0.0897)
    same = np.array([[0.2, 0.3, 0.5]])
    assert _mean_jsd(same, same) == 0.0
    p, q = np.array([[1.0, 0.0]]) * 0.999 + 0.0005, np.array([[0.0, 1.0]]) * 0.999 + 0.0005
    assert 0.8 < _mean_jsd(p, q) <= np.sqrt(np.log(2))  # JS distance, natural log: at most sqrt(ln 2)
    # n = 1 takes only the first thought of each process
    only_first = thought_divergence([["search the page", "x"]], [["search the page", "zzz"]], [["search the page"]],
                                    embed_fn, max_n=1)["rows"][0]
    assert only_first["GPT4-H"] == only_first["HQA-H"] == 0.0
