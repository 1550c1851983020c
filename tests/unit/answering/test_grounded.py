"""Evidence-grounded answering: candidates drawn from the evidence, one of them chosen by the LM (DummyLM and a
scripted llama.cpp stand-in), free text by configuration."""

from __future__ import annotations

import json

import dspy
import pytest
from dspy.utils import DummyLM

from hqa.config import load_settings
from hqa.lm.models import LlamaCppEngine
from hqa.answering.candidates import rank_candidates, show_value
from hqa.answering.grounded import resolve_answer_mode
from hqa.programs.simple import SimpleHybrid
from hqa.retrievers.base import Evidence
from hqa.toolbox import Toolbox

EVIDENCE = [
    Evidence("Animal Farm author George Orwell", "sparql",
             meta={"s": "Q1396889", "o": "Q3335", "s_label": "Animal Farm", "o_label": "George Orwell"}),
    Evidence("book=Animal Farm (Q1396889), published=1945", "sparql", meta={"query": "SELECT ..."}),
    Evidence("Nineteen Eighty-Four author George Orwell", "triples",
             meta={"s_label": "Nineteen Eighty-Four", "o_label": "George Orwell"}),
    Evidence("Eric Arthur Blair, known as George Orwell, wrote Animal Farm in 17 August 1945. The novella was a "
             "success.", "text", meta={"title": "Animal Farm (novella)"}),
]


def texts(cands):
    return [c.text for c in cands]


def test_candidates_come_from_every_kind_of_evidence():
    cands = rank_candidates("Name the author of Animal Farm.", EVIDENCE, max_candidates=20)
    by_text = {c.text: c for c in cands}
    # one-hop object label; row values; triple subject/object; passage names and dates — never "Animal Farm"
    assert {"George Orwell", "1945", "Nineteen Eighty-Four", "Eric Arthur Blair", "17 August 1945"} <= set(by_text)
    assert "Animal Farm" not in by_text
    # the LM is shown the whole fact / the sentence a candidate came from
    assert by_text["Nineteen Eighty-Four"].support == "Nineteen Eighty-Four author George Orwell"
    assert by_text["Eric Arthur Blair"].support.startswith("Eric Arthur Blair, known as George Orwell")
    assert len(rank_candidates("Name the author of Animal Farm.", EVIDENCE, max_candidates=2)) == 2


def test_names_with_initials_and_dates_are_whole_and_modifiers_are_not_names():
    ev = [Evidence("The Lord of the Rings is a novel by the English author J. R. R. Tolkien. Breaking Bad is an "
                   "American crime drama created by Vince Gilligan, first shown in January 2008.", "text",
                   meta={"title": "Novels (list)"})]
    got = texts(rank_candidates("Who wrote it?", ev, max_candidates=20))
    assert "J. R. R. Tolkien" in got and "Vince Gilligan" in got and "Novels" in got
    assert "American" not in got and "English" not in got  # "an American crime drama": a modifier
    assert "January 2008" in texts(rank_candidates("When was it first shown?", ev, max_candidates=20))


def test_a_one_word_name_joins_the_longer_name_it_begins_or_ends():
    """"Vance" next to the asked-for role and "Vivian Vance" in another sentence are one candidate, which takes the
    support of the sentence that names the role; a surname two longer names end with stays apart."""
    ev = [Evidence("I Love Lucy starred Lucille Ball, Desi Arnaz, Vivian Vance and William Frawley.", "text",
                   score=0.7, meta={"title": "I Love Lucy"}),
          Evidence("Ethel Mertz was played by Vance, and Fred Mertz by Frawley.", "text", score=0.7,
                   meta={"title": "I Love Lucy"})]
    entities = [{"label": "I Love Lucy", "mention": "i love lucy"}]
    cands = rank_candidates("Who played Ethel Mertz in I Love Lucy?", ev, entities=entities, max_candidates=30)
    assert cands[0].text == "Vivian Vance" and cands[0].support.startswith("Ethel Mertz was played by Vance")
    assert "Vance" not in texts(cands) and "Frawley" not in texts(cands)
    two = [Evidence("Anne Baxter met Tom Baxter; Baxter left.", "text", meta={"title": "Baxters"})]
    assert {"Anne Baxter", "Tom Baxter", "Baxter"} <= set(texts(rank_candidates("Who left?", two, max_candidates=9)))


def test_expected_answer_type_ranks_fitting_candidates_first():
    born = [Evidence("Patrick Stewart occupation actor", "sparql", score=0.7,
                     meta={"s_label": "Patrick Stewart", "o_label": "actor", "p_label": "occupation"}),
            Evidence("Patrick Stewart date of birth 1940-07-13", "sparql", score=0.7,
                     meta={"s_label": "Patrick Stewart", "o_label": "1940-07-13", "p_label": "date of birth"})]
    assert texts(rank_candidates("When was Patrick Stewart born?", born))[0] == "13 July 1940"
    assert texts(rank_candidates("What is Patrick Stewart's occupation?", born))[0] == "actor"
    assert show_value("1969-01-01T00:00:00Z") == "1969" and show_value("Boston") == "Boston"


def test_the_relation_the_question_asks_for_wins():
    """Two facts about the same film with equal retrieval scores: the one whose relation the question names ranks
    first — by the words near the candidate in a sentence, and by MiniLM similarity for KG facts."""
    from hqa.retrievers.rerank import Reranker

    facts = [Evidence(f"Pulp Fiction {rel} {who}", "sparql",
                      meta={"s_label": "Pulp Fiction", "p_label": rel, "o_label": who})
             for rel, who in (("cast member", "Uma Thurman"), ("director", "Quentin Tarantino"),
                              ("publication date", "1994-05-21"))]
    embed = Toolbox(load_settings(environ={})).embed_texts
    reranker = Reranker(model=None)  # the bi-encoder the programs fall back to offline

    def best(question):
        return texts(rank_candidates(question, reranker.rerank(question, facts, 3), embed=embed))[0]

    assert best("Who directed Pulp Fiction?") == "Quentin Tarantino"
    assert best("Which actors were in the cast of Pulp Fiction?") == "Uma Thurman"
    assert best("When was Pulp Fiction published?") == "21 May 1994"
    passage = [Evidence("Breaking Bad, starring Bryan Cranston and Aaron Paul, was created by Vince Gilligan.", "text",
                        score=0.7, meta={"title": "Breaking Bad"})]
    entities = [{"label": "Breaking Bad", "mention": "breaking bad"}]
    assert texts(rank_candidates("Who created Breaking Bad?", passage, entities=entities))[0] == "Vince Gilligan"
    assert texts(rank_candidates("Who starred in Breaking Bad?", passage, entities=entities))[0] == "Bryan Cranston"


def test_a_fact_whose_relation_the_question_names_outranks_one_listed_before_it():
    """Lexical relation match, no embeddings: "directed" names the director relation ("direc…"), "born" an alias of
    date of birth ("born on"), so those facts win over the ones kept first."""
    facts = [Evidence(f"Pulp Fiction {rel} {who}", "sparql", score=0.7,
                      meta={"s_label": "Pulp Fiction", "p_label": rel, "o_label": who, "p": pid})
             for rel, who, pid in (("cast member", "Uma Thurman", "P161"), ("director", "Quentin Tarantino", "P57"))]
    assert texts(rank_candidates("Who directed Pulp Fiction?", facts))[0] == "Quentin Tarantino"
    assert texts(rank_candidates("Who was in the cast of Pulp Fiction?", facts[::-1]))[0] == "Uma Thurman"


def test_question_entity_is_kept_when_the_question_offers_a_choice():
    cands = texts(rank_candidates("Which came first, Animal Farm or Nineteen Eighty-Four?", EVIDENCE,
                                  max_candidates=20))
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

    return Toolbox(settings_for(), dense=dense, bm25=bm25, reranker=KeepOrder())


def test_program_returns_the_candidate_the_lm_chose(toolbox):
    lm = DummyLM([{"answer": "Aldous Huxley"}, {"answer": "Eric Arthur Blair"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = SimpleHybrid(toolbox=toolbox, k=10,
                            choices=8)(question="Who is the author of Animal Farm?")
    t = pred.trace
    assert t["answer_mode"] == "grounded"  # auto + embedded LM
    assert pred.answer == "Eric Arthur Blair" and t["answers"]["final"] == "Eric Arthur Blair"
    assert "George Orwell" in t["candidates"] and "Eric Arthur Blair" in t["candidates"]
    assert "Animal Farm" not in t["candidates"]
    kept = {e["text"] for e in t["evidence"]}
    assert "Animal Farm author George Orwell" in kept  # from the real pack's one-hop SPARQL
    prompt = lm.history[-1]["messages"][-1]["content"]
    # every candidate is shown with the evidence it came from; the memory answer is not a candidate
    assert all(f"{c['text']} — " in prompt for c in t["candidate_support"]) and "Aldous Huxley" not in prompt


def test_one_choice_takes_the_best_ranked_candidate_without_asking(toolbox):
    lm = DummyLM([{"answer": "Aldous Huxley"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = SimpleHybrid(toolbox=toolbox, choices=1)(question="Who is the author of Animal Farm?")
    assert len(lm.history) == 1  # the parametric answer only
    assert pred.trace["candidates"] == [pred.answer] and pred.answer != "Aldous Huxley"


def test_memory_on_fallback_asks_the_lm_only_when_the_evidence_offers_no_candidate(toolbox):
    """memory="fallback": a grounded answer with one choice takes no LM call and records no memory answer; with
    nothing to choose from (a question no evidence answers) the closed-book answer is asked for and given."""
    lm = DummyLM([{"answer": "Aldous Huxley"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = SimpleHybrid(toolbox=toolbox, choices=1, memory="fallback")(
            question="Who is the author of Animal Farm?")
    assert lm.history == [] and pred.answer == pred.trace["candidates"][0] != "Aldous Huxley"
    assert not pred.trace["answers"].get("parametric")
    grounded_empty_tb = Toolbox(load_settings(environ={}), dense=lambda q, k=5: [], bm25=lambda q, k=5: [],
                        reranker=KeepOrder())
    lm = DummyLM([{"answer": "Zyx"}, {"answer": "Zyx"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        # selective answering off: with it (the embedded LM's default) no candidate is an abstention, no LM call
        # (tests/unit/answering/test_selective.py)
        pred = SimpleHybrid(toolbox=grounded_empty_tb, choices=1, memory="fallback",
                            abstain="off")(question="Qwv?")
    assert pred.trace["candidates"] == [] and pred.trace["answers"]["parametric"] == "Zyx"
    assert pred.answer == "Zyx" and len(lm.history) == 2
    with pytest.raises(ValueError, match="memory"):
        SimpleHybrid(memory="sometimes")


def test_a_reply_outside_the_candidates_takes_the_best_ranked_one(toolbox):
    lm = DummyLM([{"answer": "Aldous Huxley"}, {"answer": "Somebody Else"}, {"answer": "Somebody Else"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = SimpleHybrid(toolbox=toolbox, choices=3)(question="Who is the author of Animal Farm?")
    assert pred.answer == pred.trace["candidates"][0] and pred.trace["errors"]


def test_free_mode_answers_in_free_text(toolbox):
    lm = DummyLM([{"answer": "Aldous Huxley"}, {"answer": "Somebody Else"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = SimpleHybrid(toolbox=toolbox,
                            answer_mode="free")(question="Who is the author of Animal Farm?")
    assert pred.answer == "Somebody Else" and pred.trace["candidates"] == [] and pred.trace["answer_mode"] == "free"


def test_one_choice_is_the_default_and_takes_no_lm_call_for_the_sources(settings_for):
    """programs.choices = 1 (the default): each source's evidence candidate is its best-ranked one, no LM is asked;
    it stands beside the agent's own answer among the merge's choices."""
    from hqa.programs.humaniq import HumanIQAgent

    grounded_1_tb = Toolbox(settings_for(), dense=lambda q, k=5: [EVIDENCE[3]], reranker=KeepOrder())
    lm = DummyLM([
        {"next_thought": "search", "next_tool_name": "WikiSearch", "next_tool_args": "Animal Farm author"},
        {"title": "None", "summary": "No page is relevant."},  # WikiSearch's relevant-page LM
        {"next_thought": "done", "next_tool_name": "Finish", "next_tool_args": "Wikipedia_Answer: X, Wikidata_Answer: []"},
        {"answer": "Paris"},  # parametric
        {"answer": "Paris"},  # merge
    ])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = HumanIQAgent(toolbox=grounded_1_tb)(question="Who is the author of Animal Farm?")
    assert len(lm.history) == 5 and len(pred.trace["source_candidates"]["text"]) == 1
    best = pred.trace["source_candidates"]["text"][0]["text"]
    assert pred.trace["answers"]["text"] == "X" != best  # what the agent wrote stays its answer
    assert pred.trace["merge_candidates"] == ["X", best, "Paris"]


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
        from hqa.lm.kv_cache import PromptStats

        self.formats = []
        self.last_stats = PromptStats()

    def begin_call(self):  # the engine's per-call prompt statistics (hqa.lm.kv_cache.PrefixLlama)
        from hqa.lm.kv_cache import PromptStats

        self.last_stats = PromptStats()

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
        pred = SimpleHybrid(toolbox=toolbox, choices=3)(question="Who is the author of Animal Farm?")
    cands = pred.trace["candidates"]
    schema = engine._llama.formats[-1]["schema"]
    assert engine._llama.formats[-1]["type"] == "json_object"  # llama-cpp-python's grammar-backed format
    assert schema["properties"]["answer"]["enum"] == cands
    assert pred.answer == cands[-1]


def _agent_replies(merge_reply):
    return [
        {"next_thought": "query", "next_tool_name": "RunSparql",
         "next_tool_args": "SELECT ?x WHERE { wd:Q1000 wdt:P36 ?x }"},  # the pack's Gabon → capital Libreville
        {"next_thought": "done", "next_tool_name": "Finish",
         "next_tool_args": "Wikipedia_Answer: Port-Gentil, Wikidata_Answer: [Libreville]"},
        {"answer": "Paris"},  # parametric
        {"answer": merge_reply},
        {"answer": merge_reply},  # the JSON-adapter retry of an unparsable reply
    ]


@pytest.mark.parametrize("mode,merge_reply,expected", [
    ("auto", "Paris", "Paris"),            # grounded: one of the candidates, as chosen
    ("auto", "Lyon", "Port-Gentil"),       # grounded: not a candidate → the first source that answered
    ("free", "Lyon", "Lyon"),              # free text
])
def test_agent_merge_picks_a_source_answer_in_grounded_mode(settings_for, mode, merge_reply, expected):
    """Grounded: the merge reads the agent's answers (Port-Gentil, written without searching, and Libreville) and
    picks among them, the KG rows' best candidate (Libreville again) and the memory answer; nothing is replaced."""
    from hqa.programs.humaniq import HumanIQAgent

    grounded_merge_tb = Toolbox(settings_for(programs_answer_mode=mode))
    lm = DummyLM(_agent_replies(merge_reply))
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = HumanIQAgent(toolbox=grounded_merge_tb)(question="What is the capital of Gabon?")
    assert pred.answer == expected
    answers = pred.trace["answers"]
    assert "[[ ## wikipedia_answer ## ]]\nPort-Gentil" in lm.history[-1]["messages"][-1]["content"]
    if mode == "auto":
        assert (answers["text"], answers["kg"]) == ("Port-Gentil", "Libreville")
        assert pred.trace["merge_candidates"] == ["Port-Gentil", "Libreville", "Paris"]
    else:
        assert (answers["text"], answers["kg"]) == ("Port-Gentil", "Libreville")
        assert pred.trace.get("merge_candidates") is None


def test_a_long_memory_answer_is_no_grounded_merge_candidate(settings_for):
    from hqa.programs.humaniq import HumanIQAgent

    grounded_long_tb = Toolbox(settings_for())
    replies = _agent_replies("unused")
    replies[2] = {"answer": "The capital of Gabon is the capital of Gabon, the city, the city, the city, the city."}
    lm = DummyLM(replies)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = HumanIQAgent(toolbox=grounded_long_tb)(question="What is the capital of Gabon?")
    assert pred.trace["answers"]["parametric"] is None and pred.trace["long_parametric_answer"]
    assert pred.trace["merge_candidates"] == ["Port-Gentil", "Libreville"]  # the long memory answer is none


def test_agent_source_answers_are_grounded_in_what_its_tools_returned(settings_for):
    """The agent searched, then finished with an answer its observations do not hold: in grounded mode the text
    evidence's candidate is chosen by the LM among the passages' best four and offered to the merge beside what the
    agent wrote, which stays the text answer."""
    from hqa.programs.humaniq import HumanIQAgent

    grounded_t_tb = Toolbox(settings_for(programs_choices=4), dense=lambda q, k=5: [EVIDENCE[3]], reranker=KeepOrder())
    lm = DummyLM([
        {"next_thought": "search", "next_tool_name": "WikiSearch", "next_tool_args": "Animal Farm author"},
        {"title": "None", "summary": "No page is relevant."},  # WikiSearch's relevant-page LM
        {"next_thought": "done", "next_tool_name": "Finish",
         "next_tool_args": "Wikipedia_Answer: Missouri River, Wikidata_Answer: [None]"},
        {"answer": "Eric Arthur Blair"},  # the choice among the passage's candidates
        {"answer": "Paris"},  # parametric
        {"answer": "Eric Arthur Blair"},  # merge
    ])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = HumanIQAgent(toolbox=grounded_t_tb)(question="Who is the author of Animal Farm?")
    t = pred.trace
    assert t["written_answers"] == {"text": "Missouri River", "kg": None}
    offered = [c["text"] for c in t["source_candidates"]["text"]]
    assert {"Eric Arthur Blair", "George Orwell"} <= set(offered) and "Missouri River" not in offered
    assert t["answers"]["text"] == "Missouri River" and "kg" not in t["source_candidates"]
    assert t["merge_candidates"] == ["Missouri River", "Eric Arthur Blair", "Paris"]
    assert pred.answer == "Eric Arthur Blair"
