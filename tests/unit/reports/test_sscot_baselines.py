"""SS-CoT's baselines of Tables 1-2 (Standard with Table 5's exemplars, CoT) and ``hqa report sscot``."""

from __future__ import annotations

import json
from importlib import resources

import dspy
import pytest
from dspy.utils import DummyLM

from hqa.data.datasets import load_bamboogle
from hqa.errors import ConfigError
from hqa.jobs.evaluate import evaluate
from hqa.programs import build_program
from hqa.reports.sscot import arm_name, sscot_markdown, sscot_tables

TABLE5 = json.loads(resources.files("hqa.data").joinpath("sscot", "table5_exemplars.json").read_text("utf-8"))


def prompt_of(program, answers):
    lm = DummyLM(answers)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = program(question="Who was president of the U.S. when superconductivity was discovered?")
    return "\n".join(str(m["content"]) for m in lm.history[0]["messages"]), pred


def test_table5_file_cites_its_source_and_says_the_cot_rationales_are_hqas():
    assert "Table 5" in TABLE5["source"] and "Semi-Structured Chain-of-Thought" in TABLE5["source"]
    assert "no CoT exemplars" in TABLE5["note"]
    assert [r["answer"] for r in TABLE5["standard"]] == ["no", "National Film Award for Best Music Direction",
                                                        "Jelling"]
    assert [r["question"] for r in TABLE5["cot"]] == [r["question"] for r in TABLE5["standard"]]


def test_standard_baseline_prompt_holds_table5_and_cot_its_rationales():
    text, pred = prompt_of(build_program("closedbook", demos="sscot"), [{"answer": "William Howard Taft"}])
    for rec in TABLE5["standard"]:
        assert rec["question"] in text and rec["answer"] in text
    assert pred.answer == "William Howard Taft"
    text, pred = prompt_of(build_program("cot", demos="sscot"),
                           [{"reasoning": "Onnes, 1911; Taft.", "answer": "William Howard Taft"}])
    for rec in TABLE5["cot"]:
        assert rec["question"] in text and rec["reasoning"] in text and rec["answer"] in text
    assert pred.trace["steps"][0]["reasoning"] == "Onnes, 1911; Taft."
    zero, _ = prompt_of(build_program("closedbook"), [{"answer": "x"}])  # HumanIQ's vanilla LM: the question alone
    assert "Wessel Dammers" not in zero
    with pytest.raises(ConfigError, match="demos must be one of none, sscot"):
        build_program("cot", demos="table5")


def test_report_sscot_lines_up_the_rows_with_the_papers_bamboogle_numbers(tmp_path):
    examples = [r.to_example() for r in load_bamboogle()[:2]]
    gold = examples[0].answers[0]
    runs = []
    for name, program, kwargs, answers in (
            ("standard", "closedbook", {"demos": "sscot"}, [{"answer": gold}, {"answer": "nobody"}]),
            ("model", "sscot", {"sources": "model", "n_samples": 1}, [{"reasoning_chain": "x"}, {"answer": "n"}] * 2)):
        out = tmp_path / name
        with dspy.context(lm=DummyLM(answers), adapter=dspy.ChatAdapter()):
            evaluate(build_program(program, **kwargs), examples, out=out / "predictions.jsonl",
                     tag={"program": program, "dataset": "bamboogle", "program_kwargs": kwargs})
        runs.append(out)
    result = sscot_tables(runs[::-1])
    rows = {r["arm"]: r for r in result["rows"]}
    assert [r["arm"] for r in result["rows"]] == ["Standard", "Model"]  # the paper's row order
    assert rows["Standard"]["em"] == 0.5 and rows["Standard"]["n"] == 2
    assert (rows["Standard"]["paper_em"], rows["Standard"]["paper_f1"]) == (0.23, 0.34)
    assert (rows["Model"]["em"], rows["Model"]["paper_em"]) == (0.0, 0.42)
    assert "| bamboogle | Standard | 2 | 0.50 |" in sscot_markdown(result)
    other = tmp_path / "compmix-standard"  # the paper has no CompMix numbers: none printed beside the row
    with dspy.context(lm=DummyLM([{"answer": "x"}] * 2), adapter=dspy.ChatAdapter()):
        evaluate(build_program("closedbook", demos="sscot"), examples, out=other / "predictions.jsonl",
                 tag={"program": "closedbook", "dataset": "compmix/test", "program_kwargs": {"demos": "sscot"}})
    (line,) = sscot_tables([other])["rows"]
    assert line["arm"] == "Standard" and line["paper_em"] is None and line["paper_f1"] is None


def test_hqa_report_sscot_and_thoughts_commands(tmp_path, capsys):
    """The CLI entries: ``hqa report sscot RUN…`` prints the table; ``hqa report thoughts`` reads compare's ARM.jsonl
    rows too, and wants exactly two runs."""
    from hqa.cli.entry import main

    examples = [r.to_example() for r in load_bamboogle()[:1]]
    with dspy.context(lm=DummyLM([{"reasoning": "r", "answer": examples[0].answers[0]}]), adapter=dspy.ChatAdapter()):
        evaluate(build_program("cot", demos="sscot"), examples, out=tmp_path / "cot" / "predictions.jsonl",
                 tag={"program": "cot", "dataset": "bamboogle", "program_kwargs": {"demos": "sscot"}})
    assert main(["report", "sscot", str(tmp_path / "cot")]) == 0
    assert "| bamboogle | CoT | 1 | 1.00 | 1.00 | – | – |" in capsys.readouterr().out
    assert main(["report", "thoughts", str(tmp_path / "cot" / "predictions.jsonl")]) == 2
    assert "usage: hqa report thoughts BASELINE_RUN HQA_RUN" in capsys.readouterr().err


def test_arm_names_are_the_papers_rows():
    assert arm_name("sscot", {}) == "KG + Text + Model"
    assert arm_name("sscot", {"sources": "text,kg,model"}) == "Text + KG + Model"
    assert arm_name("closedbook", {}) == "Standard (zero-shot)" and arm_name("cot", {"demos": "sscot"}) == "CoT"
