"""Every program over live sources — Wikipedia (MediaWiki Action API), Wikidata (Wikibase API) and a SPARQL endpoint
— recorded through the HTTP cache, then replayed with every server stopped: identical traces, zero requests.

The loopback services (:mod:`standins.live`) speak the real MediaWiki, Wikibase and SPARQL response formats, backed
by the test knowledge pack; the SPARQL side is a real ``oxigraph serve-read-only`` behind a logging pass-through.
"""

from __future__ import annotations

import json

import dspy
import pytest
from conftest import KeepOrderReranker
from lmkit import QUESTION, SPARQL, ScriptLM, stable
from prockit import UA, live_settings

from hqa.programs import build_program
from hqa.toolbox import Toolbox
from standins.live import Api

PROGRAMS = ["hqa", "static", "latefusion", "detllm", "sscot", "simple"]


def run_program(name: str, settings, lm: ScriptLM) -> tuple[dict, Toolbox]:
    tb = Toolbox(settings, reranker=KeepOrderReranker())
    kwargs = {"hqa": {"max_iters": 6}, "latefusion": {"max_iters": 6}, "sscot": {"n_samples": 1}}.get(name, {})
    program = build_program(name, toolbox=tb, **kwargs)
    lm.reset()
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = program(question=QUESTION)
    return json.loads(json.dumps(pred.trace, default=str)), tb


def requests_made(tb: Toolbox) -> int:
    built = tb.built()  # only the clients the run used (asking for another would build it)
    clients = [tb.http if "http" in built else None, getattr(tb.sparql, "client", None) if "sparql" in built else None]
    return sum(c.network_requests for c in clients if c is not None)


@pytest.mark.parametrize("name", PROGRAMS)
def test_live_then_replay_with_servers_stopped(name, services, settings_for, tmp_path):
    cache = tmp_path / "http.sqlite"
    lm = ScriptLM()
    recorded, tb = run_program(name, live_settings(settings_for, services, cache, "record"), lm)
    assert requests_made(tb) > 0
    paths = {r["path"] for r in Api.log}
    # every program linked through the Wikibase API and queried the KG over HTTP; all but SS-CoT (which reads
    # text only for a mask the KG could not fill, and here the KG fills it) searched Wikipedia
    assert {"/sparql", "/wikidata/api.php"} <= paths
    assert ("/w/api.php" in paths) == (name != "sscot")
    assert all(r["ua"] == UA for r in Api.log)
    assert all(r["accept"] == "application/sparql-results+json" for r in Api.log if r["path"] == "/sparql")
    assert "not in the recorded cache" not in json.dumps(recorded)
    n_logged = len(Api.log)

    services["stop"]()
    replayed, tb2 = run_program(name, live_settings(settings_for, services, cache, "replay"), lm)
    assert requests_made(tb2) == 0 and len(Api.log) == n_logged
    assert stable(replayed) == stable(recorded)


def test_agent_tools_over_live_sources_and_wire_parameters(services, settings_for, tmp_path):
    recorded, _tb = run_program("hqa", live_settings(settings_for, services, tmp_path / "c.sqlite", "live"), ScriptLM())
    obs = {c["tool"]: c["output"] for c in recorded["tool_calls"]}
    assert obs["GetWikidataID"].startswith("['Q1000'")  # Gabon, found through wbsearchentities
    assert "Q3825" in obs["RunSparql"] and obs["GetLabel"] == "['Libreville']"
    assert obs["WikiSearch"].startswith("Page: ")
    search = next(r["params"] for r in Api.log if r["params"].get("action") == "wbsearchentities")
    assert search["search"] == "Gabon" and search["language"] == "en" and search["type"] == "item"
    assert search["format"] == "json" and search["maxlag"] == "5"
    wiki = next(r["params"] for r in Api.log if r["params"].get("list") == "search")
    assert wiki["srsearch"] == "capital of Gabon" and wiki["maxlag"] == "5"
    sparql = next(r["params"] for r in Api.log if r["path"] == "/sparql" and "Q1000" in r["params"]["query"])
    assert "wdt:P36" in sparql["query"] and "LIMIT" in sparql["query"]  # the gate imposed a LIMIT


def test_wikibase_faults_are_observations(services, settings_for, tmp_path):
    settings = live_settings(settings_for, services, tmp_path / "c.sqlite", "live")
    tb = Toolbox(settings, reranker=KeepOrderReranker())
    Api.fault = ["maxlag"]  # retried after Retry-After, then answered
    assert [c.id for c in tb.linker.link("Gabon", QUESTION, k=1)] == ["Q1000"]
    assert sum(r["params"].get("action") == "wbsearchentities" for r in Api.log) == 2
    from hqa.programs.humaniq_tools import AgentTools

    tools = AgentTools(tb, QUESTION, generate_sparql=lambda *a: SPARQL)
    Api.fault = ["html"] * 5
    out = tools("GetWikidataID", "Libreville")  # a page's wikibase_item: Wikipedia's pageprops (HumanIQ)
    assert out.startswith("Wikipedia unavailable:") and "HTTP 502" in out and "pageprops" in out
    out = tools("WikiSearch", "Libreville")
    assert out.startswith("Wikipedia unavailable:") and "HTTP 502" in out


def test_replay_miss_is_an_observation_not_a_crash(services, settings_for, tmp_path):
    settings = live_settings(settings_for, services, tmp_path / "empty.sqlite", "replay")
    tb = Toolbox(settings, reranker=KeepOrderReranker())
    from hqa.programs.humaniq_tools import AgentTools

    tools = AgentTools(tb, QUESTION, generate_sparql=lambda *a: SPARQL)
    assert "not in the recorded cache" in tools("WikiSearch", "Gabon")
    assert "not in the recorded cache" in tools("GetWikidataID", "Gabon")
    assert "not in the recorded cache" in tools("RunSparql", SPARQL)
    assert Api.log == []  # replay never touched the network


def test_sparql_label_linker_needs_no_api(services, settings_for, tmp_path):
    """``linker.kind = sparql``: labels, aliases and descriptions come from the store itself (here the pack's, over
    HTTP as a local Wikidata copy would be); the Wikibase API is never called."""
    settings = settings_for(text_kind="wikipedia", text_endpoint=services["wiki"], linker_kind="sparql",
                            kg_kind="sparql", kg_endpoint=services["sparql"], http_cache_mode="off",
                            http_user_agent=UA)
    tb = Toolbox(settings, reranker=KeepOrderReranker())
    assert [c.id for c in tb.linker.spot(QUESTION, k=1)] == ["Q1000"]
    assert tb.linker.link("gabon", QUESTION, k=1)[0].id == "Q1000"  # case variants of the mention are tried
    assert tb.linker.labels(["Q3825", "Q1000"]) == {"Q3825": "Libreville", "Q1000": "Gabon"}
    assert tb.linker.title_to_qid("Libreville") == "Q3825"
    queries = [r["params"]["query"] for r in Api.log if r["path"] == "/sparql"]
    assert queries and any('"Gabon"@en' in q for q in queries)
    assert not any(r["path"] == "/wikidata/api.php" for r in Api.log)
