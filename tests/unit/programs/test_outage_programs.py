"""An outage or a replay-cache miss is an observation, never a crash, on every program: with the Wikibase API,
Wikipedia and the SPARQL endpoint all down (a loopback port with nothing listening, or a stand-in answering 503),
and in replay mode with an empty cache, each program answers and its trace says which source could not answer."""

from __future__ import annotations


class _DownLinker:
    """A linker whose service is down: every lookup raises, as the Wikibase API linker does."""

    entities: dict = {}

    def __getattr__(self, name):
        from hqa.errors import EndpointError

        def down(*args, **kwargs):
            raise EndpointError(f"{name}: wikidata api answered HTTP 503")

        return down


def test_the_guard_answers_empty_with_the_reason_and_notes_it_in_the_running_trace():
    from hqa.retrievers.linking.entities import GuardedLinker
    from hqa.schemas.trace import new_trace

    linker = GuardedLinker(_DownLinker())
    trace = new_trace("probe", "Who directed Alien?")
    found = linker.link("Alien", "Who directed Alien?")
    assert found == [] and "link: wikidata api answered HTTP 503" in found.error
    assert linker.spot("Who directed Alien?") == [] and linker.labels(["Q1"]) == {}
    assert linker.label("Q1") is None and linker.title_to_qid("Alien") is None
    assert trace.source_errors == {"linker": "entity linker unavailable: link: wikidata api answered HTTP 503"}
    assert linker.entities == {}  # everything else is the wrapped linker's


def test_the_neighbourhood_retriever_reports_the_linker_outage():
    from hqa.retrievers.linking.entities import GuardedLinker
    from hqa.retrievers.neighbourhood import NeighbourhoodBM25

    class NoSparql:
        def run(self, query):
            raise AssertionError("no entity was linked: nothing to query")

    hits = NeighbourhoodBM25(GuardedLinker(_DownLinker()), NoSparql())("Who directed Alien?", k=5)
    assert hits == [] and "spot: wikidata api answered HTTP 503" in hits.error
