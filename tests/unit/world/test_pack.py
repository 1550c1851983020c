"""Knowledge pack: extraction rules on hand-made records, then the real build from the recorded sources (pulled
into the data directory; from the mirror here)."""

import json

import pytest

from hqa.data.pack_manifest import read_manifest
from hqa.world.pack.observations import (
    facts_from_sparql,
    labels_from_observation,
    parse_result_rows,
    passages_from_observation,
    query_shape,
)
from hqa.errors import PackMissingError

WD = "http://www.wikidata.org/entity/"
WDT = "http://www.wikidata.org/prop/direct/"


def test_passages_from_observation_splits_pages():
    obs = "Page: Missouri River\nSummary: The Missouri is long.\nPage: Missouri\nSummary: A state.\nPage: Empty\nSummary: "
    assert passages_from_observation(obs) == [("Missouri River", "The Missouri is long."), ("Missouri", "A state.")]


@pytest.mark.parametrize(
    "obs,rows",
    [
        ("[{'value': 'http://www.wikidata.org/entity/Q5419'}]", [{None: WD + "Q5419"}]),
        ("{'message': [{'value': '2021-06-24T00:00:00Z'}]}", [{None: "2021-06-24T00:00:00Z"}]),
        ("[{'novel': {'type': 'uri', 'value': 'http://www.wikidata.org/entity/Q1'}}]", [{"novel": WD + "Q1"}]),
        ("True", [{None: "true"}]),
        ("Empty result.", None),
        ('"That query failed. Perhaps you could try a different one?"', None),
    ],
)
def test_parse_result_rows(obs, rows):
    assert parse_result_rows(obs) == rows


def test_statement_pairs_collapse_to_direct_claims():
    form, pv, pats, _ = query_shape("SELECT DISTINCT ?x1 WHERE { wd:Q29466808 p:P577 ?x2 . ?x2 ps:P577 ?x1 . }")
    assert form == "SelectQuery" and pv == ["x1"]
    assert [(str(s), str(p), str(o)) for s, p, o in pats] == [(WD + "Q29466808", WDT + "P577", "x1")]


def test_a_recorded_query_is_parsed_once_for_its_facts_qualifiers_and_reproducibility(monkeypatch):
    """A pack build reads each recorded query's shape for its facts, its qualifiers and whether it is reproducible:
    rdflib parses it once (issue 38: the parse was half of a pack build's ``collect``), and what each reader gets is
    what it got from a parse of its own."""
    from unittest import mock

    from hqa.retrievers.sparql import guard
    from hqa.world.pack import observations as O

    parse = mock.Mock(wraps=guard.parse_sparql)
    monkeypatch.setattr(guard, "parse_sparql", parse)
    q = "SELECT ?x1 WHERE { wd:Q1726 p:P1082 ?st . ?st ps:P1082 ?x1 . ?st pq:P585 ?when . }"  # a query no test reads
    rows = [{"x1": "3645000", "when": "2019-12-31T00:00:00Z"}]
    facts, _ = facts_from_sparql(q, rows)
    quals = O.qualifiers_from_sparql(q, rows)
    reason = O.unseen_values(q, rows)
    assert parse.call_count == 1
    O._shape.cache_clear()
    assert (facts_from_sparql(q, rows)[0], O.qualifiers_from_sparql(q, rows), O.unseen_values(q, rows)) == \
        (facts, quals, reason)
    assert parse.call_count == 2 and facts and quals  # the query grounds a fact and a qualifier


def test_facts_only_from_required_patterns():
    q = "SELECT ?r WHERE { ?r wdt:P31 wd:Q4022 . OPTIONAL { ?r wdt:P5 ?z } }"
    facts, _ = facts_from_sparql(q, [{None: WD + "Q5419"}])
    assert {(str(s), str(p), str(o)) for s, p, o in facts} == {(WD + "Q5419", WDT + "P31", WD + "Q4022")}
    # the OPTIONAL part is never asserted, UNION branches neither
    q2 = "SELECT ?r WHERE { { ?r wdt:P1 wd:Q1 } UNION { ?r wdt:P2 wd:Q2 } }"
    assert facts_from_sparql(q2, [{None: WD + "Q7"}])[0] == []


def test_values_only_rows_need_a_single_projected_variable():
    q = "SELECT ?a ?b WHERE { ?a wdt:P1 ?b }"
    assert facts_from_sparql(q, [{None: WD + "Q1"}])[0] == []
    facts, _ = facts_from_sparql(q, [{"a": WD + "Q1", "b": WD + "Q2"}])
    assert len(facts) == 1


def test_ask_true_gives_ground_facts_and_label_service_gives_labels():
    facts, _ = facts_from_sparql("ASK { wd:Q1 wdt:P2 wd:Q3 }", [{None: "true"}])
    assert len(facts) == 1
    assert facts_from_sparql("ASK { wd:Q1 wdt:P2 wd:Q3 }", [{None: "false"}])[0] == []
    q = 'SELECT ?x ?xLabel WHERE { wd:Q1 wdt:P36 ?x . SERVICE wikibase:label { bd:serviceParam wikibase:language "en". } }'
    facts, labels = facts_from_sparql(q, [{"x": WD + "Q3825", "xLabel": "Libreville"}])
    assert labels == [("Q3825", "Libreville")] and len(facts) == 1


# what the recorded GetLabel tool answered when its input was not a Python list (13 recorded steps)
TOOL_MESSAGE = "Try again by passing values in a Python List format with comma separated values!"


def test_a_label_tools_message_is_not_a_label():
    assert labels_from_observation("['Libreville', 'Gabon']") == ["Libreville", "Gabon"]
    assert labels_from_observation(" ['[Missouri River]']") == ["Missouri River"]
    assert labels_from_observation(TOOL_MESSAGE) == []
    assert labels_from_observation("") == []


def test_real_pack_build(built_pack):
    pack = built_pack / "pack"
    manifest = read_manifest(pack)
    counts = manifest["counts"]
    assert counts["facts"] > 1000 and counts["passages"] > 100 and counts["labelled_entities"] > 1000
    facts = [json.loads(line) for line in open(pack / "facts.jsonl")]
    assert all(f["sources"] for f in facts)  # provenance on every fact
    # a fact recorded in the F9 late-fusion log (publication date) is in the pack with its source
    f9 = [f for f in facts if f["s"] == f"<{WD}Q29466808>" and f["p"] == f"<{WDT}P577>"]
    assert f9 and any("compmix_latefusion_wikidata.json" in s for f in f9 for s in f["sources"])
    titles = {json.loads(line)["title"] for line in open(pack / "passages.jsonl")}
    assert "Missouri River" in titles
    # the GetLabel tool's message is nobody's label: Q10853588 keeps the label SQUALL's entity list gives it
    labels = {e["id"]: e["label"] for e in map(json.loads, open(pack / "entities.jsonl"))}
    assert TOOL_MESSAGE not in labels.values()
    assert labels["Q10853588"] == "Kamala Harris"


def test_store_answers_with_provenance_graphs(built_pack):
    import pyoxigraph as ox

    store = ox.Store.read_only(str(built_pack / "pack" / "kg"))
    q = f"SELECT ?g WHERE {{ GRAPH ?g {{ <{WD}Q29466808> <{WDT}P577> ?d }} }}"
    graphs = [s["g"].value for s in store.query(q)]
    assert graphs and all(g.startswith("urn:hqa:source:") for g in graphs)


def test_missing_pack_is_a_clear_error(tmp_path):
    with pytest.raises(PackMissingError, match="hqa pack build"):
        read_manifest(tmp_path / "nope")
