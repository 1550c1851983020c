"""Read-only SPARQL: query checking, the embedded store, and a real `oxigraph serve-read-only` over HTTP."""


import pytest

from hqa.errors import QueryRejected
from hqa.retrievers.sparql.guard import prepare_query

WD = "http://www.wikidata.org/entity/"


@pytest.mark.parametrize(
    "query,needle",
    [
        ("INSERT DATA { wd:Q1 wdt:P1 wd:Q2 }", "INSERT"),
        ("DELETE WHERE { ?s ?p ?o }", "DELETE"),
        ("LOAD <http://example.org/x.ttl>", "LOAD"),
        ("CLEAR ALL", "CLEAR"),
        ("DROP GRAPH <urn:x>", "DROP"),
        ("SELECT * WHERE { SERVICE <http://example.org/sparql> { ?s ?p ?o } }", "SERVICE"),
        ("select * where { service silent ?ep { ?s ?p ?o } }", "SERVICE"),
        ("SELECT ?x WHERE { ?x wdt:P31 }", "malformed"),
        ("", "empty"),
        ("SELECT ?x WHERE { ?x ?p ?o } " + "#" * 30000, "longer"),
    ],
)
def test_rejected_queries(query, needle):
    with pytest.raises(QueryRejected) as err:
        prepare_query(query)
    assert needle in str(err.value)


def test_keywords_inside_strings_and_iris_are_not_operations():
    form, q = prepare_query('SELECT ?x WHERE { ?x rdfs:label "DROP me, INSERT you"@en . ?x ?p <http://e.org/LOAD> }')
    assert form == "SELECT" and q.rstrip().endswith("LIMIT 101")


def test_limit_is_imposed_and_lowered():
    assert prepare_query("SELECT ?s WHERE { ?s ?p ?o } LIMIT 5", limit=100)[1].rstrip().endswith("LIMIT 5")
    assert "LIMIT 11" in prepare_query("SELECT ?s WHERE { ?s ?p ?o } LIMIT 5000", limit=10)[1]
    assert "LIMIT" not in prepare_query("ASK { ?s ?p ?o }")[1].split("}")[-1]


def test_store_select_with_label_service(store):
    res = store.run('SELECT ?x ?xLabel WHERE { wd:Q1000 wdt:P36 ?x . '
                    'SERVICE wikibase:label { bd:serviceParam wikibase:language "en". } }')
    assert res.ok and res.rows == [{"x": WD + "Q3825", "xLabel": "Libreville"}]


def test_store_truncates_and_reports(store):
    res = store.run("SELECT ?s WHERE { ?s ?p ?o }")
    assert res.ok and len(res.rows) == 20 and res.truncated


def test_store_errors_are_observations_not_crashes(store):
    for q in ("SELEC nonsense", "DROP ALL", "SELECT ?x WHERE { ?x ?y }"):
        res = store.run(q)
        assert not res.ok and res.error.strip()
    empty = store.run('SELECT ?x WHERE { ?x rdfs:label "no such label at all"@en }')
    assert empty.ok and empty.rows == [] and empty.boolean is None


def test_store_is_never_written(store, built_pack):
    before = store.run("SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }").rows
    for q in ("INSERT DATA { <urn:a> <urn:b> <urn:c> }", "CLEAR DEFAULT", "LOAD <file:///etc/passwd>"):
        assert not store.run(q).ok
    assert store.run("SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }").rows == before


def test_unicode_labels_and_ask(store):
    labels = store.labels(["Q1000", "Q3825"])
    assert labels == {"Q1000": "Gabon", "Q3825": "Libreville"}
    assert store.run("ASK { wd:Q1000 wdt:P36 wd:Q3825 }").boolean is True
    res = store.run('SELECT ?x WHERE { ?x rdfs:label "Zürich \u00e9\u4e2d"@en }')
    assert res.ok and res.rows == []


def test_entity_linker_title_to_qid_and_labels(settings_for):
    from hqa.toolbox import Toolbox

    linker = Toolbox(settings_for()).linker
    assert linker.title_to_qid("Animal Farm") == "Q1396889"
    assert linker.title_to_qid("Animal Farm (novella)") == "Q1396889"
    assert linker.title_to_qid("No Such Page At All") is None
    assert linker.link("Gabon")[0].id == "Q1000" and linker.label("Q3825") == "Libreville"


def test_checks_are_memoised_per_query_shape_not_per_entity(monkeypatch):
    """A hop's one-hop queries differ only in the QID: the second one is not parsed again, yet it gets its own text
    (and LIMIT), and a query that differs in structure is checked on its own."""
    import hqa.retrievers.sparql.guard as S

    parsed: list[str] = []
    real = S._check

    def spy(full, prefix_lines, local_labels):
        parsed.append(full)
        return real(full, prefix_lines, local_labels)

    monkeypatch.setattr(S, "_check_template", S.functools.lru_cache(maxsize=16)(spy))
    one_hop = "SELECT ?p ?o WHERE {{ wd:{} ?p ?o . FILTER(STRSTARTS(STR(?p), \"http://www.wikidata.org/prop/direct/\")) }}"
    form, q1 = prepare_query(one_hop.format("Q42"), limit=30)
    form2, q2 = prepare_query(one_hop.format("Q9876543"), limit=30)
    assert (form, form2) == ("SELECT", "SELECT") and len(parsed) == 1
    assert "wd:Q9876543 ?p ?o" in q2 and "wd:Q42" not in q2 and q2.rstrip().endswith("LIMIT 31")
    prepare_query("ASK { wd:Q7 wdt:P31 wd:Q5 }")
    assert len(parsed) == 2  # another shape: parsed


def test_queries_code_builds_are_not_parsed_and_anything_else_in_their_place_is(monkeypatch):
    """The one-hop neighbourhood, a label lookup and the ping run without a parse (their form is known); a query
    that differs from those shapes in any variable place — an injected pattern, an update, an OFFSET — is parsed
    and judged as untrusted SPARQL."""
    import hqa.retrievers.sparql.guard as S

    parsed: list[str] = []
    real = S._check

    def spy(full, prefix_lines, local_labels):
        parsed.append(full)
        return real(full, prefix_lines, local_labels)

    monkeypatch.setattr(S, "_check_template", spy)
    monkeypatch.setattr(S, "_check", spy)
    built = [S.ONE_HOP.format(qid="Q42", limit=30), S.LABELS.format(values="wd:Q42 wdt:P31 wd:P31"), S.PING]
    assert [prepare_query(q, limit=30)[0] for q in built] == ["SELECT", "SELECT", "ASK"] and parsed == []
    assert prepare_query(built[0], limit=10)[1].rstrip().endswith("LIMIT 11")  # still limited (+1: truncation)
    with pytest.raises(QueryRejected):  # parsed, and refused (here: malformed)
        prepare_query(S.ONE_HOP.format(qid="Q42 ?p ?o } ; INSERT DATA { wd:Q1 wd:P1 wd:Q2 } #", limit=30))
    for other in (S.ONE_HOP.format(qid="Q42", limit="30 OFFSET 5"),
                  S.LABELS.format(values="wd:Q42 <http://example.org/x>"),
                  S.ONE_HOP.format(qid="Q42", limit=30).replace("?o .", "?o . ?o ?q ?r .")):
        parsed.clear()
        prepare_query(other)
        assert len(parsed) == 1, other


def test_a_rejection_reports_positions_in_the_query_as_written():
    """The memo is keyed on a normalised text; errors still name the line and column of what was written."""
    query = "SELECT ?x WHERE { wd:Q123456789 wdt:P31 ?x ; wdt:P17 }"
    for _ in range(2):  # the second time the normalised shape has been seen (and failed) before
        with pytest.raises(QueryRejected, match="at line 1, column 46$"):  # 37 in the normalised text
            prepare_query(query)
    for bad in ("SELECT * WHERE { SERVICE wd:Q5 { ?s ?p ?o } }", "SELECT * WHERE { SERVICE wd:Q6 { ?s ?p ?o } }"):
        with pytest.raises(QueryRejected, match="SERVICE"):  # the second has the first's shape: still refused
            prepare_query(bad)
