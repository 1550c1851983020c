"""HumanIQ's six tools (HumanIQ §3; NIMI-research/Hybrid-QA app/Tools/Tool.py) on every source kind: the pack, a
world with passages, and live MediaWiki / Wikibase / SPARQL through the loopback stand-ins (request parameters on the
wire are HumanIQ's); the agent's step signature generated from the tool objects; WikiSearch's and Read's LMs as
predictors of the agent."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM
from lmkit import Calls

from hqa.programs.humaniq import HumanIQAgent
from hqa.programs.humaniq_tools import (ALL_TOOLS, LIST_FORMAT, NO_LABEL, NO_QID, NO_SEARCH_RESULT, TEXT_TOOLS, TOOL_SPECS,
                                AgentTools, tool_specs)
from hqa.toolbox import Toolbox
from hqa.retrievers.base import SparqlResult
from hqa.retrievers.sparql.results import QUERY_FAILED, humaniq_observation
from hqa.signatures.humaniq import agent_instructions, agent_step

Q = "Who played Lucy Ricardo in I Love Lucy?"


@pytest.fixture()
def pack_tb(settings_for):
    return Toolbox(settings_for())


# -- the tool objects and the agent's signature ---------------------------------------------------------------------
def test_step_signature_is_generated_from_the_tool_objects(monkeypatch):
    sig = agent_step(tool_specs(ALL_TOOLS))
    assert sig.output_fields["next_tool_name"].annotation.__args__ == ALL_TOOLS + ("Finish",)
    for spec in TOOL_SPECS:
        assert spec.line() in sig.instructions
    assert "Input: a list of Wikipedia page titles" in sig.instructions  # HumanIQ's input conventions
    assert "both Wikipedia and Wikidata" in sig.instructions
    text_only = agent_step(tool_specs(TEXT_TOOLS))
    assert set(text_only.output_fields["next_tool_name"].annotation.__args__) == set(TEXT_TOOLS) | {"Finish"}
    assert "GetWikidataID" not in text_only.instructions and "Use Wikipedia" in text_only.instructions
    # one source of truth: a changed tool description is what the agent is told
    changed = [type(t)(t.name, "DOES SOMETHING ELSE.", t.takes, t.source) for t in TOOL_SPECS]
    assert "- WikiSearch: DOES SOMETHING ELSE." in agent_instructions(changed)
    with pytest.raises(ValueError, match="unknown tool"):
        tool_specs(("WikiSearch", "Nope"))


def test_each_tool_object_runs_its_own_handler(monkeypatch):
    """Dispatch goes through the handler table keyed by the tool objects' names, one handler per tool."""
    from hqa.programs import humaniq_tools as T

    assert set(T.HANDLERS) == set(ALL_TOOLS)
    for name in ALL_TOOLS:
        monkeypatch.setitem(T.HANDLERS, name, lambda self, arg, extra, name=name: f"{name} ran on {arg}")
    agent = T.AgentTools(object(), "Q?", lambda *a: "")
    for name in ALL_TOOLS:
        assert agent(name, "[x]") == f"{name} ran on [x]"
    assert [c.tool for c in agent.calls] == list(ALL_TOOLS)


def test_the_agent_prompt_describes_the_tools_and_wikisearch_and_read_are_its_predictors(pack_tb):
    agent = HumanIQAgent(toolbox=pack_tb, max_iters=3)
    names = dict(agent.named_predictors())
    assert {"react", "relevant_page", "read"} <= set(names)
    answers = [{"next_thought": "search", "next_tool_name": "WikiSearch", "next_tool_args": "i love lucy"},
               {"title": "I Love Lucy", "summary": "A sitcom starring Lucille Ball as Lucy Ricardo."},
               {"next_thought": "read", "next_tool_name": "Read", "next_tool_args": "I Love Lucy"},
               {"answer": "Lucille Ball"},
               {"next_thought": "done", "next_tool_name": "Finish",
                "next_tool_args": "Wikipedia_Answer: Lucille Ball, Wikidata_Answer: [None]"},
               {"answer": "Lucille Ball"}, {"answer": "Lucille Ball"}]
    lm = DummyLM(answers)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = agent(question=Q)
    system = lm.history[0]["messages"][0]["content"]
    assert "WikiSearch: finds the Wikipedia page relevant to the question" in system
    assert "GetWikidataID: returns the Wikidata QIDs of Wikipedia pages" in system
    page_prompt = lm.history[1]["messages"][-1]["content"]
    assert Q in page_prompt and "Page: I Love Lucy\\nSummary: I Love Lucy is an American television sitcom" in \
        page_prompt  # the three pages, as the JSON list the adapter shows
    read_prompt = lm.history[3]["messages"][-1]["content"]
    assert Q in read_prompt and "Lucy Ricardo" in read_prompt  # the page's text reaches the reader
    obs = {c["tool"]: c["output"] for c in pred.trace["tool_calls"]}
    assert obs == {"WikiSearch": "Page: I Love Lucy\nSummary: A sitcom starring Lucille Ball as Lucy Ricardo.",
                   "Read": "Page: I Love Lucy\nAnswer: Lucille Ball"}


# -- text tools on the pack -------------------------------------------------------------------------------------------
def test_wikisearch_gives_the_lm_three_summaries_and_keeps_the_page_it_picks(pack_tb):
    pick = Calls(("I Love Lucy", "A sitcom."))
    tools = AgentTools(pack_tb, Q, lambda *a: "", relevant_page=pick)
    assert tools("WikiSearch", "i love lucy") == "Page: I Love Lucy\nSummary: A sitcom."
    question, pages = pick.seen[0]
    assert question == Q and len(pages) == 3 and len({p.split("\n")[0] for p in pages}) == 3
    assert all(p.startswith("Page: ") and "\nSummary: " in p for p in pages)
    assert pages[0].startswith("Page: I Love Lucy\n")
    # HumanIQ's "question # keywords" input: the question part goes to the LM
    tools("WikiSearch", "Who created it? # [i love lucy, sitcom]")
    assert pick.seen[1][0] == "Who created it?"
    # a page the LM names that was not found: its message is the observation, no invented page
    none = AgentTools(pack_tb, Q, lambda *a: "", relevant_page=Calls(("None", "No page is relevant.")))
    assert none("WikiSearch", "i love lucy") == "No page is relevant."


def test_wikisearch_without_results_says_so_in_humaniqs_words(settings_for):
    tb = Toolbox(settings_for(), dense=lambda q, k=5: [])
    pick = Calls(("x", "y"))
    assert AgentTools(tb, Q, lambda *a: "", relevant_page=pick)("WikiSearch", "zzz") == NO_SEARCH_RESULT
    assert pick.seen == []


def test_wikisearchsummary_is_the_raw_top_page_per_keyword_and_not_a_repeat_of_wikisearch(pack_tb):
    pick = Calls(("I Love Lucy", "A sitcom."))
    tools = AgentTools(pack_tb, Q, lambda *a: "", relevant_page=pick)
    tools("WikiSearch", "Breaking Bad")
    out = tools("WikiSearchSummary", "Breaking Bad, Emily in Paris")
    pages = out.split("\nPage: ")
    assert len(pages) == 2 and out.startswith("Page: Breaking Bad\nSummary: Breaking Bad is")
    assert pages[1].startswith("Emily in Paris\nSummary: ")
    assert len(pick.seen) == 1  # no LM: the leads as found
    assert tools.repeats == [] and len(tools.calls) == 2
    assert tools("WikiSearchSummary", " breaking bad, emily in paris ").startswith("Already done: step 2")


def test_read_hands_the_page_and_question_to_the_reader(pack_tb):
    reader = Calls("Lucy Ricardo")
    tools = AgentTools(pack_tb, Q, lambda *a: "", read=reader)
    assert tools("Read", "i love lucy") == "Page: I Love Lucy\nAnswer: Lucy Ricardo"
    question, title, document = reader.seen[0]
    assert question == Q and title == "I Love Lucy" and "Lucy Ricardo" in document
    assert tools("Read", "No Such Page Title Anywhere Xyzzy").startswith("Page: ")  # the nearest page, read


# -- KG tools on the pack ---------------------------------------------------------------------------------------------
def test_getwikidataid_maps_page_titles_in_a_list(pack_tb):
    tools = AgentTools(pack_tb, Q, lambda *a: "")
    assert tools("GetWikidataID", "I Love Lucy") == "['Q181943']"
    out = ast.literal_eval(tools("GetWikidataID", "['Riverdale (American TV series)', 'Xyzzy Not A Page']"))
    assert out == ["Q23001951", NO_QID]
    assert tools.calls[-1].qids["Riverdale (American TV series)"] == "Q23001951"


def test_runsparql_and_getlabel_answer_in_humaniqs_formats(pack_tb):
    tools = AgentTools(pack_tb, Q, lambda *a: "")
    out = tools("RunSparql", "SELECT ?x1 WHERE { wd:Q181943 p:P161 ?x2. ?x2 ps:P161 wd:Q209662; pq:P453 ?x1.}")
    assert out == "{'message': [{'value': 'http://www.wikidata.org/entity/Q17379228'}]}"
    out = tools("RunSparql", "SELECT ?who WHERE { wd:Q181943 p:P161 ?s . ?s ps:P161 ?who . } LIMIT 1")
    assert ast.literal_eval(out)["message"][0]["who"]["type"] == "uri"
    assert tools("RunSparql", "ASK { wd:Q76 p:P102 ?x1 . ?x1 ps:P102 wd:Q29552 . }") == "{'message': True}"
    assert tools("RunSparql", "SELECT ?x1 WHERE { wd:Q1 wdt:P999999 ?x1 }") == str({"message": QUERY_FAILED})
    assert tools("RunSparql", "DROP ALL") == str({"message": QUERY_FAILED})
    assert tools("GetLabel", "[Q17379228, Q181943]") == "['Lucy', 'I Love Lucy']"
    assert tools("GetLabel", "Q17379228") == LIST_FORMAT
    assert tools("GetLabel", "[Q999999999]") == NO_LABEL


def test_humaniq_observation_shapes():
    assert humaniq_observation(SparqlResult("q", boolean=False)) == "{'message': False}"
    rows = [{"x1": "1969"}, {"n": "http://www.wikidata.org/entity/Q1"}]
    assert ast.literal_eval(humaniq_observation(SparqlResult("q", rows=rows))) == {"message": [
        {"value": "1969"}, {"n": {"type": "uri", "value": "http://www.wikidata.org/entity/Q1"}}]}
    assert humaniq_observation(SparqlResult("q", error="timeout", unavailable=True)).startswith("That query failed")


# -- a world with passages --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def text_world(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent.parent / "benchmarks"))
    import gen_passages as G

    sys.path.pop(0)
    from hqa.retrievers.passage_store import open_text
    from hqa.world import text as T

    tmp = tmp_path_factory.mktemp("world-pages")
    corpus = tmp / "kilt.json"
    G.write(corpus, "kilt", 4, 1)
    section = T.build_text(tmp / "w", [(corpus, "kilt")], embedder="minilm", engine="auto", progress=False,
                           batch_size=8)
    return open_text(tmp / "w", section), G


def test_world_pages_are_titles_with_their_lead_text_and_qid(text_world):
    from hqa.retrievers.wikipedia import WorldPages

    tw, _G = text_world
    title = tw.store.by_rows([0])[0]["title"]

    class Labels:
        def title_to_qid(self, t):
            return "Q42" if t.casefold() == title.casefold() else None

    pages = WorldPages(tw, Labels())
    assert title in pages.search_pages(title, 3)
    assert pages.lead(title.upper())[0] == title
    full = pages.full_text(title)[1]
    assert full.startswith(pages.lead(title)[1]) and len(full) >= len(pages.lead(title)[1])
    assert pages.qids([title, "nothing"]) == {title: "Q42", "nothing": None}
