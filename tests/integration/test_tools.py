"""HumanIQ's six tools (HumanIQ §3; NIMI-research/Hybrid-QA app/Tools/Tool.py) on every source kind: the pack, a
world with passages, and live MediaWiki / Wikibase / SPARQL through the loopback stand-ins (request parameters on the
wire are HumanIQ's); the agent's step signature generated from the tool objects; WikiSearch's and Read's LMs as
predictors of the agent."""

from __future__ import annotations

from conftest import KeepOrderReranker
from lmkit import Calls

from hqa.programs.humaniq_tools import NO_QID, AgentTools
from hqa.toolbox import Toolbox

Q = "Who played Lucy Ricardo in I Love Lucy?"


# -- live: the loopback stand-ins, HumanIQ's request parameters on the wire ----------------------------------------
from prockit import live_settings  # noqa: E402


def test_live_requests_are_humaniqs(services, settings_for, tmp_path):
    from standins.live import Api

    tb = Toolbox(live_settings(settings_for, services, tmp_path / "c.sqlite", "live"), reranker=KeepOrderReranker())
    pick = Calls(("I Love Lucy", "A sitcom."))
    tools = AgentTools(tb, Q, lambda *a: "", relevant_page=pick)
    assert tools("WikiSearch", "i love lucy") == "Page: I Love Lucy\nSummary: A sitcom."
    assert pick.seen[0][1][0].startswith("Page: I Love Lucy\nSummary: I Love Lucy is")
    search = [r["params"] for r in Api.log if r["params"].get("list") == "search"]
    extracts = [r["params"] for r in Api.log if r["params"].get("prop") == "extracts"]
    assert search[0]["srsearch"] == "i love lucy" and search[0]["srlimit"] == "3"
    assert extracts and all(p.get("exintro") == "1" and p.get("explaintext") == "1" for p in extracts)
    assert tools("GetWikidataID", "[I Love Lucy, Xyzzy Nowhere]") == str(["Q181943", NO_QID])
    props = [r["params"] for r in Api.log if r["params"].get("prop") == "pageprops"]
    assert [(p["ppprop"], p["titles"]) for p in props] == [("wikibase_item", "I Love Lucy"),
                                                           ("wikibase_item", "Xyzzy Nowhere")]
    Api.log.clear()
    assert tools("GetLabel", "[Q17379228]") == "['Lucy']"
    labels = [r["params"] for r in Api.log if r["params"].get("action") == "wbgetentities"]
    assert labels and labels[0]["ids"] == "Q17379228" and "labels" in labels[0]["props"].split("|")
    out = tools("RunSparql", "SELECT ?x1 WHERE { wd:Q181943 p:P161 ?x2. ?x2 ps:P161 wd:Q209662; pq:P453 ?x1.}")
    assert out == "{'message': [{'value': 'http://www.wikidata.org/entity/Q17379228'}]}"
