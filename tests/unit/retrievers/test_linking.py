"""Mention detection of the default entity linker on hand-built entity tables (no model: similarity injected)."""

from __future__ import annotations

import pytest
from conftest import ENTITIES

from hqa.retrievers.linking.entities import EntityLinker, label_aliases, mention_norm


def ids(cands):
    return [c.id for c in cands]


@pytest.fixture()
def linker():
    return EntityLinker([dict(e) for e in ENTITIES])


def test_aliases_and_normalisation():
    assert mention_norm("Manchester City F.C.'s stadium") == "manchester city fc stadium"
    assert dict(label_aliases("Riverdale (American TV series)")) == {"riverdale american tv series": 1.0,
                                                                      "riverdale": 0.95}
    assert dict(label_aliases("The Lord of the Rings"))["lord of the rings"] == 0.95
    assert "ring" not in dict(label_aliases("The Ring"))  # a one-word remainder must be long enough to be a name


@pytest.mark.parametrize("question,expected", [
    ("Who created the Riverdale tv series?", "Q23001951"),             # label without its "(…)" qualifier
    ("Who is the author of the book Lord of the Rings?", "Q15228"),    # label without its leading article
    ("What is the name of Manchester City FC's stadium?", "Q50602"),   # F.C. / possessive
    ("Which position played on team by Neymer?", "Q142794"),           # one edit on a 6-letter name
    ("who wrote the lord of the ring book?", "Q15228"),                # fuzzy multi-word mention
    ("Who is the lead singer of the band, Tool?", "Q184827"),          # generic lowercase concepts rank last
])
def test_mention_detection_finds_the_entity_first(linker, question, expected):
    assert ids(linker.spot(question, k=1)) == [expected]


def test_type_cues_pick_the_entity_the_question_is_about(linker):
    assert ids(linker.spot("Who was the producer of the movie Jurassic Park?", k=1)) == ["Q167726"]
    assert ids(linker.spot("Who wrote the novel Jurassic Park?", k=1)) == ["Q756866"]


def test_description_similarity_breaks_remaining_ties():
    def prefers_franchise(question, texts):
        return [1.0 if "franchise" in t else 0.0 for t in texts]

    linker = EntityLinker([dict(e) for e in ENTITIES], similarity=prefers_franchise)
    assert ids(linker.spot("Tell me about Jurassic Park", k=1)) == ["Q2336369"]


def test_description_similarity_compares_only_the_best_scored_candidates():
    """Twelve entities share the label "Mercury"; only the six most popular ones (the best-scored by the popularity
    prior, whatever their id order) have their descriptions compared with the question, and the similarity still
    decides among them."""
    from hqa.retrievers.linking.entities import SIMILARITY_CANDIDATES

    entities = [{"id": f"Q{100 + i}", "label": "Mercury", "description": f"meaning number {i}", "degree": i * 10}
                for i in range(12)]
    asked: list[list[str]] = []

    def prefers_seven(question, texts):
        asked.append(list(texts))
        return [1.0 if t.endswith("number 7") else 0.0 for t in texts]

    linker = EntityLinker(entities, similarity=prefers_seven)
    assert ids(linker.spot("What is Mercury?", k=1)) == ["Q107"]
    assert len(asked) == 1 and len(asked[0]) == SIMILARITY_CANDIDATES == 6
    assert sorted(asked[0]) == sorted(f"Mercury: meaning number {i}" for i in range(6, 12))


def test_popularity_prior_between_identical_labels(linker):
    assert ids(linker.spot("Who directs The Ring?", k=1)) == ["Q3202038"]  # more pack facts, though a larger QID


def test_generic_concepts_rank_after_names(linker):
    # "book" is a type cue and a label, but a lowercase (generic) one: the named entity comes first
    assert ids(linker.spot("Which book is about Tool?", k=2)) == ["Q184827", "Q571"]


def test_non_overlapping_mentions_and_k(linker):
    # "rings" inside "lord of the rings" is not a second mention
    assert ids(linker.spot("Who is the author of The Lord of the Rings?", k=3)) == ["Q15228"]
    found = linker.spot("Is Neymar from Gabon or Riverdale?", k=5)
    assert sorted(ids(found)) == ["Q142794", "Q23001951", "Q7"]
    assert linker.spot("Gabon", k=0) == [] and linker.spot("Gabon", k=-3) == []
    assert linker.spot("", k=2) == []


def test_exact_mode_is_the_earlier_spotter(linker):
    assert ids(linker.spot("Who created the Riverdale tv series?", k=2, mode="exact")) == []
    assert ids(linker.spot("Where is Gabon?", k=2, mode="exact")) == ["Q7"]
