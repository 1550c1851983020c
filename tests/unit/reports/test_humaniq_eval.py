"""HumanIQ's published evaluation computed in process (the unit half of tests/integration/test_humaniq_eval.py):
Table 5 per benchmark and Aggregated, Figure 4's three- vs two-source agreement, Table 9's error categories, RQ8's
library statistics, the authors' GPT-4 outputs imported as runs, old rows still rendering.  Expected values are
worked out by hand in the comments."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hqa.data.store import require_dataset
from hqa.errors import DataError
from hqa.reports.errors import error_categories
from hqa.reports.library import library_stats
from hqa.reports.sources import HUMANIQ_TABLE5, bucket, source_analysis, source_table
from hqa.reports.summary import summarize_rows, write_report

require_dataset("humaniq-runs")
HUMANIQ = require_dataset("humaniq-late-fusion") / "humaniq"  # the pulled HumanIQ repository files (a mirror here)
COMPMIX_RUN = HUMANIQ / "long_data" / "11-09-2023_21_42_52_compmix_answer.json"


def row(i, gold, final, text=None, kg=None, param=None, dataset=None, trace=None, **extra):
    from hqa.scoring.metrics import score_all

    t = {"answers": {"text": text, "kg": kg, "parametric": param, "final": final}, **(trace or {})}
    return {"id": f"q{i}", "question": f"question {i}", "gold": gold, "gold_ids": [], "answer": final,
            "dataset": dataset, "trace": t, "error": None, "scores": score_all(final, gold), **extra}


# -- Figure 4: three-source agreement apart from two-source ------------------------------------------------------
def test_figure4_keeps_three_source_agreement_apart_from_two_source():
    rows = [row(0, ["Paris"], "Paris", text="Paris", kg="Paris", param="paris"),   # 3 agree, right
            row(1, ["Paris"], "Paris", text="Paris", param="Paris"),       # 2 sources agree, right
            row(2, ["Rome"], "Milan", text="Rome", kg="Milan"),            # 2 sources differ, wrong
            row(3, ["Rome"], "Rome", text="Rome", kg="Milan", param="Rome")]       # 3 sources, 2 agree, right
    a = source_analysis(rows)["agreement"]
    assert {b: v["count"] for b, v in a.items() if v["count"]} == {
        "3 agree": 1, "2 agree": 1, "2 differ": 1, "3 sources, 2 agree": 1}
    assert (a["2 differ"]["accuracy"], a["3 agree"]["accuracy"], a["3 agree"]["share"]) == (0.0, 1.0, 0.25)
    # two agreeing answers are not "3 agree", and three answers with one agreeing pair are not "2 agree"
    assert bucket(["x", "x"]) == "2 agree" and bucket(["x", "x", "y"]) == "3 sources, 2 agree"


# -- Table 5 per benchmark and Aggregated --------------------------------------------------------------------------
def test_table5_per_benchmark_and_aggregated_as_the_unweighted_mean():
    rows = [
        # compmix: text answers 2/2 (1 right), kg 1/2 (right), memory 2/2 (1 right)
        row(0, ["alpha"], "alpha", text="alpha", kg="alpha", param="alpha", dataset="humaniq-compmix"),
        row(1, ["beta"], "gamma", text="gamma", param="delta", dataset="compmix/test"),
        # qald: 4 questions; text answers 1/4 (right); kg 2/4 (1 right); memory 4/4 (2 right)
        row(2, ["eps"], "eps", text="eps", kg="eps", param="eps", dataset="qald10"),
        row(3, ["phi"], "rho", kg="rho", param="phi", dataset="qald9plus"),
        row(4, ["eta"], "iota", param="iota", dataset="qald10"),
        row(5, ["nu"], "kappa", param="kappa", dataset="qald10"),
    ]
    t5 = source_table(rows)
    assert list(t5) == ["qald", "compmix", "aggregated"]  # the paper's column order, then Aggregated
    # compmix text: re 2/2 = 100, prec 1/2 = 50, prev: final "alpha" = text on q0, "gamma" = text on q1 -> 100
    assert t5["compmix"]["text"] == {"re": 100.0, "prec": 50.0, "prev": 100.0}
    # qald text: re 1/4 = 25, prec 100, prev 25; kg: re 50, prec 50, prev (q2 eps, q3 rho) 50
    assert t5["qald"]["text"] == {"re": 25.0, "prec": 100.0, "prev": 25.0}
    assert t5["qald"]["kg"] == {"re": 50.0, "prec": 50.0, "prev": 50.0}
    # Aggregated = mean of the two benchmarks' values (not pooled over the 6 questions): text re (100 + 25) / 2
    assert t5["aggregated"]["text"] == {"re": 62.5, "prec": 75.0, "prev": 62.5}
    # kg: compmix re 50, prec 100, prev 50 -> aggregated (50 + 50) / 2, (100 + 50) / 2, (50 + 50) / 2
    assert t5["aggregated"]["kg"] == {"re": 50.0, "prec": 75.0, "prev": 50.0}


def test_published_table5_is_consistent_with_its_aggregated_column():
    """The constants carry the paper's numbers: each Aggregated cell is the mean of the three benchmarks (±0.1
    rounding), and GPT-4 on CompMix is text 71.5 / 92.0, KG 65.2 / 83.3, parametric 100 / 80.8."""
    for model in HUMANIQ_TABLE5.values():
        for per in model.values():
            for k in range(3):
                mean = sum(per[b][k] for b in ("mintaka", "qald", "compmix")) / 3
                assert abs(mean - per["aggregated"][k]) <= 0.1
    g4 = HUMANIQ_TABLE5["GPT-4"]
    assert (g4["text"]["compmix"][:2], g4["kg"]["compmix"][:2], g4["parametric"]["compmix"][:2]) == (
        (71.5, 92.0), (65.2, 83.3), (100.0, 80.8))


# -- Table 9 error categories --------------------------------------------------------------------------------------
def test_error_categories_from_traces():
    failed_sparql = {"sparql": [{"query": "SELECT ...", "error": "The given query failed"}]}
    wrong_entity = {"entities": [{"id": "Q9"}]}
    no_finish = {"steps": [{"tool": "WikiSearch"}], "finished": False}
    searched = {"tool_calls": [{"tool": "WikiSearch", "input": "x", "output": "a page about something else"}]}
    read_miss = {"tool_calls": [{"tool": "WikiSearch", "input": "x", "output": "It was founded in 1812."}]}
    rows = [row(0, ["alpha"], "alpha", text="alpha"),                              # right: no category
            row(1, ["alpha"], "beta", text="alpha", param="beta"),         # a source was right -> (5)
            row(2, ["alpha"], "beta", trace=no_finish),                    # loop ended without Finish -> (4)
            row(3, ["alpha"], "beta", trace=wrong_entity, gold_entities=["Q1"]),  # linked Q9, gold Q1 -> (3)
            row(4, ["alpha"], "beta", trace=failed_sparql),                # no query returned rows -> (2)
            row(5, ["alpha"], "beta", trace=searched),                     # gold in no retrieved text -> (6)
            row(6, ["1812"], "1813", trace=read_miss),                     # gold in the retrieved text -> (7)
            row(7, ["alpha"], "beta"),                                     # nothing to tell from -> unclassified
            row(8, ["alpha"], "beta", text="alpha", trace={"merged": False})]  # no merge step: not (5), unclassified
    ec = error_categories(rows)
    assert ec["wrong"] == 8
    assert {k: v for k, v in ec["counts"].items() if v} == {
        "(2) SPARQL query generation": 1, "(3) entity selection": 1, "(4) iteration limit error": 1,
        "(5) final response generation step": 1, "(6) search: incorrect document picked": 1,
        "(7) answer not found in document": 1, "not classified automatically": 2}


# -- RQ8: statistics of a human library ----------------------------------------------------------------------------
def _process(question: str, steps: list[tuple[str, str, str, str]], wiki: str, wd: str, response: str) -> str:
    body = "".join(f"\n\nThought:{t}\n\nAction:{a}\n\nAction Input: {i}\n\nObservation: {o}" for t, a, i, o in steps)
    return (f"Question:{question}\n{body}\nThought: I now know the final answer.\nFinal Answer: Wikipedia_Answer: "
            f"{wiki}, Wikidata_Answer: [{wd}]\n\nAssistant Response: {response}")


def test_library_stats_on_a_small_fixture(tmp_path):
    from hqa.lm.prefix_cache import encoding

    steps_a = [("find the page", "WikiSearch", "Gabon", "Page: Gabon. Its capital is Libreville."),
               ("link it", "GetWikidataID", "Gabon", "['Q1000']"),
               ("query", "GenerateSparql", "Q1000", "SELECT ?x WHERE {{ wd:Q1000 wdt:P36 ?x }}")]
    steps_b = [("search", "WikiSearch", "Oslo", "Page: Oslo. Oslo is the capital of Norway.")]
    records = [{"Question": "Capital of Gabon?", "One_Shot": _process("Capital of Gabon?", steps_a, "Libreville",
                                                                        "Libreville", "It is Libreville.")},
               {"Question": "Capital of Norway?", "One_Shot": _process("Capital of Norway?", steps_b, "Oslo", "None",
                                                                         "Oslo.")}]
    (tmp_path / "compmix.json").write_text(json.dumps(records), encoding="utf-8")
    stats = library_stats(["compmix"], path=tmp_path)
    row_ = stats["per_benchmark"]["compmix"]
    # tool calls: 3 and 1 -> 2.0 per process
    assert (row_["processes"], row_["tool_calls"]) == (2, 2.0)
    # the human-written part by hand: question, thought / action / input per step, final answers, response
    enc = encoding()
    written_a = ("Question: Capital of Gabon?\nThought: find the page\nAction: WikiSearch\nAction Input: Gabon\n"
                 "Thought: link it\nAction: GetWikidataID\nAction Input: Gabon\nThought: query\n"
                 "Action: GenerateSparql\nAction Input: Q1000\nThought: I now know the final answer.\n"
                 "Final Answer: Wikipedia_Answer: Libreville, Wikidata_Answer: [Libreville]\n"
                 "Assistant Response: It is Libreville.")
    written_b = ("Question: Capital of Norway?\nThought: search\nAction: WikiSearch\nAction Input: Oslo\n"
                 "Thought: I now know the final answer.\nFinal Answer: Wikipedia_Answer: Oslo, Wikidata_Answer: None\n"
                 "Assistant Response: Oslo.")
    assert row_["tokens_written"] == round((len(enc.encode(written_a)) + len(enc.encode(written_b))) / 2, 4)
    # the whole process adds the observations, so it is longer
    assert row_["tokens_whole"] > row_["tokens_written"]
    assert stats["tokenizer"] == "cl100k_base" and stats["paper"] == {"tool_calls": 6.75, "tokens": 642.0}
    with pytest.raises(DataError):  # a library without this benchmark's file
        library_stats(["qald"], path=tmp_path)


def test_library_stats_on_the_shipped_compmix_library():
    from hqa.lm.prefix_cache import encoding

    raw = json.loads((Path(__file__).parents[3] / "hqa" / "data" / "humaniq" / "compmix.json").read_text())
    stats = library_stats(["compmix"])["per_benchmark"]["compmix"]
    # 20 processes; tool calls = the Action lines of the shipped text (119 / 20 = 5.95)
    actions = [len(re.findall(r"\nAction:", r["One_Shot"])) for r in raw]
    assert (stats["processes"], stats["tool_calls"]) == (20, round(sum(actions) / 20, 4)) == (20, 5.95)
    # the whole process as the prompt lays it out is within 2% of the shipped One_Shot text's token count
    enc = encoding()
    shipped = sum(len(enc.encode(r["One_Shot"])) for r in raw) / 20
    assert abs(stats["tokens_whole"] - shipped) / shipped < 0.02


def test_cli_report_library(capsys):
    from hqa.cli.entry import main

    assert main(["report", "library", "--dataset", "compmix"]) == 0
    out = capsys.readouterr().out
    assert "| compmix | 20 | 5.95 |" in out and "cl100k_base" in out
    assert "| HumanIQ RQ8 (paper) | – | 6.75 | 642.0" in out


def test_import_mintaka_rows_are_unmatched_and_left_out_of_scores(tmp_path):
    from hqa.data.authors_runs import import_run

    import_run([HUMANIQ / "long_data" / "mintaka_replaced_longanswer_gpt4.json"], tmp_path / "m")
    s = write_report(tmp_path / "m")
    # Mintaka gold here is the dev excerpt, not the test set: all 11 questions are kept but none is scored
    assert (s["n"], s["unmatched"], s["metrics"]["recall"]) == (11, 11, None)
    # the response rate needs no gold: counted over all 11 by hand from the file's non-empty answers
    from hqa.scoring.metrics import is_empty_answer

    raw = json.loads((HUMANIQ / "long_data" / "mintaka_replaced_longanswer_gpt4.json").read_text())
    fields = (("text", "wikipedia_answer"), ("kg", "wikidata_answer"), ("parametric", "internal_knowledge"))
    by_hand = {s: round(sum(1 for r in raw if not is_empty_answer(r[f])) / 11, 4) for s, f in fields}
    assert s["responses_all_rows"] == by_hand
    assert "no gold answer to match" in (tmp_path / "m" / "summary.md").read_text()


def test_import_late_fusion_keeps_the_pipeline_trace(tmp_path):
    from hqa.data.authors_runs import import_run

    import_run([HUMANIQ / "late_fusion" / "compmix_latefusion_wikidata.json"], tmp_path / "lf")
    rows = {r["question"]: r for r in map(json.loads, (tmp_path / "lf" / "predictions.jsonl").open())}
    f9 = rows["When publication date of the movie F9?"]
    # GenerateSparql then RunSparql; the query returned three dates, the first of which is not the gold day
    assert [c["tool"] for c in f9["trace"]["tool_calls"]] == ["GenerateSparql", "RunSparql"]
    assert f9["trace"]["sparql"][0]["rows"][1] == {"value": "2021-06-25T00:00:00Z"}
    assert f9["trace"]["answers"]["parametric"] == "June 25, 2021" and f9["trace"]["answers"]["text"] is None
    # the kg answer lists 24, 25 June and 15 July: it contains the gold date -> recall 1; its first answer
    # (24 June) is not the gold -> Hits@1 0
    assert (f9["scores"]["recall"], f9["scores"]["hits1"]) == (1.0, 0.0)
    s = write_report(tmp_path / "lf")
    # a failed query ("The given query failed …") is a SPARQL error, not rows
    assert s["sparql"]["issued"] > s["sparql"]["succeeded"] > 0
    # the structured half alone has no final response generation: no row is put in (5)
    assert s["error_categories"]["counts"]["(5) final response generation step"] == 0


# -- old rows --------------------------------------------------------------------------------------------------------
def test_rows_written_before_these_reports_still_render(tmp_path):
    """A row as hqa.jobs.evaluate wrote it before qald_f1, datasets per benchmark and the import fields existed."""
    old = {"id": "q0", "question": "Capital of France?", "gold": ["Paris"], "gold_ids": [], "answer": "Paris | Lyon",
           "trace": {"program": "hqa", "answers": {"text": "Paris", "kg": "Paris", "parametric": "Lyon"}},
           "error": None, "prompt_tokens": 10, "completion_tokens": 2, "tool_calls": 1, "lm_calls": 2, "seconds": 0.1,
           "scores": {"em": 0.0, "f1": 0.5, "recall": 1.0, "hits1": 1.0}}
    (tmp_path / "predictions.jsonl").write_text(json.dumps(old) + "\n", encoding="utf-8")
    s = write_report(tmp_path)
    # qald_f1 is recomputed from the answer: {Paris, Lyon} against {Paris}: P 1/2, R 1 -> F 2/3
    assert s["metrics"]["qald_f1"] == 0.6667 and s["qald"]["f1_qald"] == 0.6667
    assert s["sources"]["agreement"]["3 sources, 2 agree"]["count"] == 1 and s["unmatched"] == 0
    assert "## Answer metrics" in (tmp_path / "summary.md").read_text()
    assert summarize_rows([old])["table5"]["?"]["text"]["re"] == 100.0


def test_show_pools_runs_of_several_benchmarks_into_table5_columns(tmp_path, capsys):
    from hqa.cli.entry import main

    def write(folder, rows):
        folder.mkdir()
        (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return str(folder)

    a = write(tmp_path / "cm", [dict(row(0, ["alpha"], "alpha", text="alpha", dataset="humaniq-compmix"), id="cm:0")])
    b = write(tmp_path / "qa", [dict(row(0, ["beta"], "gamma", text="gamma", dataset="qald10"), id="qa:0")])
    assert main(["report", "show", a, b, "--out", str(tmp_path / "pooled"), "--json"]) == 0
    t5 = json.loads(capsys.readouterr().out)["table5"]
    # compmix text 100% right, qald text 0% right -> Aggregated prec (100 + 0) / 2
    assert (t5["compmix"]["text"]["prec"], t5["qald"]["text"]["prec"], t5["aggregated"]["text"]["prec"]) == (
        100.0, 0.0, 50.0)
    # the same questions twice are not pooled: a clear error, no report
    assert main(["report", "show", a, a, "--out", str(tmp_path / "again")]) != 0
    assert "in both" in capsys.readouterr().err and not (tmp_path / "again").exists()
    # pooling again rebuilds the pooled folder; pooling into a run's own folder is refused and loses nothing
    assert main(["report", "show", a, b, "--out", str(tmp_path / "pooled")]) == 0
    before = (tmp_path / "cm" / "predictions.jsonl").read_text()
    assert main(["report", "show", a, b, "--out", a]) != 0
    assert "holds a run's predictions.jsonl" in capsys.readouterr().err
    assert (tmp_path / "cm" / "predictions.jsonl").read_text() == before


def test_import_refuses_bad_input_with_clear_errors(tmp_path):
    from hqa.data.authors_runs import import_run

    not_a_list = tmp_path / "x_compmix_answer.json"
    not_a_list.write_text('{"question": "q"}', encoding="utf-8")
    with pytest.raises(DataError, match="expected a JSON list"):
        import_run([not_a_list], tmp_path / "a")
    unnamed = tmp_path / "answers.json"
    unnamed.write_text("[]", encoding="utf-8")
    with pytest.raises(DataError, match="cannot tell the benchmark"):
        import_run([unnamed], tmp_path / "b")
    with pytest.raises(DataError, match="separate runs"):
        import_run([COMPMIX_RUN, HUMANIQ / "late_fusion" / "compmix_latefusion_wikidata.json"], tmp_path / "c")
    with pytest.raises(DataError, match="no such file"):
        import_run([tmp_path / "missing_compmix.json"], tmp_path / "d")
    assert not any((tmp_path / n).exists() for n in "abcd")  # nothing half-written


def test_report_import_refuses_deep_or_hostile_files_in_one_line(tmp_path, capsys):
    """A deeply nested file was "unexpected RecursionError" (exit 1); a NaN long answer became "", a numeric
    question a string, and a 2,000,000-character question was imported while ask, serve and batch cap questions at
    1,000."""
    from hqa.cli.entry import main
    from hqa.errors import MAX_QUESTION_CHARS

    good = {"question": "Who wrote Dune?", "internal_knowledge": None, "wikipedia_answer": "Frank Herbert",
            "wikidata_answer": None, "assistant_response": "Frank Herbert", "long_answer": "Frank Herbert"}
    cases = {"deep": "[" * 100_000 + "]" * 100_000,
             "nan": json.dumps([good])[:-2] + ', "long_answer": NaN}]',
             "number": json.dumps([{**good, "question": 42}]),
             "long": json.dumps([{**good, "question": "q" * 2_000_000}]),
             "late_fusion": json.dumps([{"question": "Who?", "wikidata_answer": ["x"], "error": None}])}
    expected = {"deep": "nested too deeply", "nan": "NaN is not a JSON value",
                "number": "record 0: 'question' must be text or null, found int",
                "long": f"record 0: question is 2000000 characters long; the limit is {MAX_QUESTION_CHARS}",
                "late_fusion": "record 0: 'wikidata_answer' must be text or null, found list"}
    for name, text in cases.items():
        path = tmp_path / ("late_fusion" if name == "late_fusion" else "long_data") / f"compmix_{name}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        assert main(["report", "import", str(path), "--out", str(tmp_path / f"run-{name}")]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("hqa: error: ") and expected[name] in err[0], (name, err)
        assert not (tmp_path / f"run-{name}").exists()  # nothing written
