"""Evidence-grounded answering: candidates drawn from the evidence, one of them chosen by the LM (DummyLM and a
scripted llama.cpp stand-in), free text by configuration."""

from __future__ import annotations

import json

import dspy
import pytest
from dspy.utils import DummyLM

from hqa.config import load_settings
from hqa.lm import LlamaCppEngine
from hqa.programs.grounded import evidence_candidates, resolve_answer_mode, show_value
from hqa.programs.simple import SimpleHybrid
from hqa.retrievers.base import Evidence
from hqa.retrievers.registry import Toolbox, use_toolbox

EVIDENCE = [
    Evidence("Animal Farm author George Orwell", "sparql",
             meta={"s": "Q1396889", "o": "Q3335", "s_label": "Animal Farm", "o_label": "George Orwell"}),
    Evidence("book=Animal Farm (Q1396889), published=1945", "sparql", meta={"query": "SELECT ..."}),
    Evidence("Nineteen Eighty-Four author George Orwell", "triples",
             meta={"s_label": "Nineteen Eighty-Four", "o_label": "George Orwell"}),
    Evidence("Eric Arthur Blair, known as George Orwell, wrote Animal Farm in 17 August 1945. The novella was a "
             "success.", "text", meta={"title": "Animal Farm (novella)"}),
]


def test_candidates_come_from_the_evidence_in_order():
    cands = evidence_candidates("Name the author of Animal Farm.", EVIDENCE)
    # one-hop object label; row values; triple subject/object; passage names and dates — never "Animal Farm"
    assert cands == ["George Orwell", "1945", "Nineteen Eighty-Four", "Eric Arthur Blair", "17 August 1945"]
    assert evidence_candidates("Name the author of Animal Farm.", EVIDENCE, max_candidates=2) == \
        ["George Orwell", "1945"]


def test_expected_answer_type_filters_candidates():
    assert evidence_candidates("Who is the author of Animal Farm?", EVIDENCE) == \
        ["George Orwell", "Nineteen Eighty-Four", "Eric Arthur Blair"]
    assert evidence_candidates("When was Animal Farm published?", EVIDENCE) == ["1945", "17 August 1945"]
    assert evidence_candidates("How many pages has Animal Farm?", EVIDENCE) == ["1945"]  # the only number
    born = [Evidence("Patrick Stewart date of birth 1940-07-13", "sparql", meta={"o_label": "1940-07-13"}),
            Evidence("Patrick Stewart occupation actor", "sparql", meta={"o_label": "actor"})]
    assert evidence_candidates("When was Patrick Stewart born?", born) == ["13 July 1940"]
    assert evidence_candidates("Who is Patrick Stewart?", born) == ["13 July 1940", "actor"]  # nothing fits: all
    assert show_value("1969-01-01T00:00:00Z") == "1969" and show_value("Boston") == "Boston"


def test_question_entity_is_kept_when_the_question_offers_a_choice():
    cands = evidence_candidates("Which came first, Animal Farm or Nineteen Eighty-Four?", EVIDENCE)
    assert "Animal Farm" in cands and "Nineteen Eighty-Four" in cands


class KeepOrder:
    kind = "test"

    def rerank(self, query, items, k):
        return items[:k]


@pytest.fixture()
def toolbox(settings_for):
    def dense(query, k=5):
        return [EVIDENCE[3]]

    def bm25(query, k=5):
        return [EVIDENCE[2]]

    return use_toolbox(Toolbox(settings_for(), dense=dense, bm25=bm25, reranker=KeepOrder()), name="grounded-t")


def test_program_returns_the_candidate_the_lm_chose(toolbox):
    lm = DummyLM([{"answer": "Aldous Huxley"}, {"answer": "Eric Arthur Blair"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = SimpleHybrid(toolbox="grounded-t", k=10)(question="Who is the author of Animal Farm?")
    t = pred.trace
    assert t["answer_mode"] == "grounded"  # auto + embedded LM
    assert pred.answer == "Eric Arthur Blair" and t["answers"]["final"] == "Eric Arthur Blair"
    assert "George Orwell" in t["candidates"] and "Eric Arthur Blair" in t["candidates"]
    assert "Animal Farm" not in t["candidates"]
    kept = {e["text"] for e in t["evidence"]}
    assert "Animal Farm author George Orwell" in kept  # from the real pack's one-hop SPARQL
    prompt = lm.history[-1]["messages"][-1]["content"]
    assert all(c in prompt for c in t["candidates"]) and "Aldous Huxley" in prompt


def test_a_reply_outside_the_candidates_keeps_the_memory_answer(toolbox):
    lm = DummyLM([{"answer": "Aldous Huxley"}, {"answer": "Somebody Else"}, {"answer": "Somebody Else"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = SimpleHybrid(toolbox="grounded-t")(question="Who is the author of Animal Farm?")
    assert pred.answer == "Aldous Huxley" and pred.trace["errors"]


def test_free_mode_answers_in_free_text(toolbox):
    lm = DummyLM([{"answer": "Aldous Huxley"}, {"answer": "Somebody Else"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = SimpleHybrid(toolbox="grounded-t", answer_mode="free")(question="Who is the author of Animal Farm?")
    assert pred.answer == "Somebody Else" and pred.trace["candidates"] == [] and pred.trace["answer_mode"] == "free"


def test_answer_mode_setting():
    local = load_settings(environ={})
    remote = load_settings(environ={"HQA_LM__PROVIDER": "openai", "HQA_LM__MODEL": "gpt-4o-mini"})
    assert resolve_answer_mode(None, local) == "grounded" and resolve_answer_mode(None, remote) == "free"
    forced = load_settings(environ={"HQA_LM__PROVIDER": "openai", "HQA_LM__MODEL": "m",
                                    "HQA_PROGRAMS__ANSWER_MODE": "grounded"})
    assert resolve_answer_mode(None, forced) == "grounded" and resolve_answer_mode("free", forced) == "free"
    from hqa.errors import ConfigError

    with pytest.raises(ConfigError, match="programs.answer_mode"):
        load_settings(environ={"HQA_PROGRAMS__ANSWER_MODE": "creative"})


class ScriptedLlama:
    """Stands in for ``llama_cpp.Llama``: records the response_format and obeys an enum if one is given."""

    def __init__(self):
        self.formats = []

    def create_chat_completion(self, **kwargs):
        fmt = kwargs.get("response_format")
        self.formats.append(fmt)
        enum = ((fmt or {}).get("schema") or {}).get("properties", {}).get("answer", {}).get("enum")
        answer = enum[-1] if enum else "Aldous Huxley"
        return {"choices": [{"message": {"content": json.dumps({"answer": answer})}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def test_embedded_engine_gets_the_candidates_as_a_grammar_enum(toolbox, tmp_path):
    gguf = tmp_path / "stand-in.gguf"
    gguf.write_bytes(b"")
    engine = LlamaCppEngine(gguf)
    engine._llama = ScriptedLlama()
    lm = dspy.LM("local/stand-in", engine=engine, cache=False)
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        pred = SimpleHybrid(toolbox="grounded-t")(question="Who is the author of Animal Farm?")
    cands = pred.trace["candidates"]
    schema = engine._llama.formats[-1]["schema"]
    assert engine._llama.formats[-1]["type"] == "json_object"  # llama-cpp-python's grammar-backed format
    assert schema["properties"]["answer"]["enum"] == cands
    assert pred.answer == cands[-1]


@pytest.mark.real_lm
def test_hqa_ask_readme_example_with_the_embedded_model(built_pack, tmp_path):
    """The README example through the CLI with SmolLM2-135M: the grounded answer is the author."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env["HQA_PATHS__ARTIFACTS"] = str(built_pack)
    proc = subprocess.run([sys.executable, "-m", "hqa.cli", "ask", "--json", "Who is the author of Animal Farm?"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout[proc.stdout.index("{"):])
    trace = out.get("trace", out)
    assert trace["answer_mode"] == "grounded" and "George Orwell" in trace["candidates"]
    assert out["answer"] == "George Orwell"


def _agent_replies(merge_reply):
    return [
        {"next_thought": "done", "next_tool_name": "Finish",
         "next_tool_args": "Wikipedia_Answer: Libreville, Wikidata_Answer: [Libreville]"},
        {"answer": "Paris"},  # parametric
        {"answer": merge_reply},
        {"answer": merge_reply},  # the JSON-adapter retry of an unparsable reply
    ]


@pytest.mark.parametrize("mode,merge_reply,expected", [
    ("auto", "Paris", "Paris"),            # grounded: one of the source answers, as chosen
    ("auto", "Lyon", "Libreville"),        # grounded: not a source answer → the first source that answered
    ("free", "Lyon", "Lyon"),              # free text
])
def test_agent_merge_picks_a_source_answer_in_grounded_mode(settings_for, mode, merge_reply, expected):
    from hqa.programs.hqa_agent import HQAAgent

    use_toolbox(Toolbox(settings_for(programs_answer_mode=mode)), name="grounded-merge")
    lm = DummyLM(_agent_replies(merge_reply))
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = HQAAgent(toolbox="grounded-merge")(question="What is the capital of Gabon?")
    assert pred.answer == expected
    assert pred.trace.get("merge_candidates") == (["Libreville", "Paris"] if mode == "auto" else None)
