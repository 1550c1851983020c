"""The label-store linker (hqa/world/label_store.py) links like the pack linker without loading the label set: same
entities on the hand-built table of test_linking.py and on the real pack's labels."""

from __future__ import annotations

import pytest
from conftest import ENTITIES

from hqa.retrievers.linking.entities import EntityLinker, load_pack_entities
from hqa.retrievers.linking.label_store import LabelStoreLinker
from hqa.world.label_store import LabelStoreWriter


def write_label_store(path, entities, language="en") -> dict:
    """A finished label store from ``{id, label, description, aliases, degree}`` records (the pack's entities, the
    tables here), written as the world builder writes one chunk."""
    names, degree = [], {}
    for e in entities:
        eid = e["id"]
        if e.get("label"):
            names.append((eid, "label", e["label"]))
        if e.get("description"):
            names.append((eid, "description", e["description"]))
        names.extend((eid, "alias", a) for a in e.get("aliases") or ())
        degree[eid] = int(e.get("degree", 0) or 0)
    writer = LabelStoreWriter(path)
    try:
        writer.commit_chunk(names, degree, (0, '{"done": true}'))
        return writer.finish(language)
    finally:
        writer.close()


@pytest.fixture()
def store_linker(tmp_path):
    write_label_store(tmp_path / "labels.sqlite", [dict(e) for e in ENTITIES])
    return LabelStoreLinker(tmp_path / "labels.sqlite")


QUESTIONS = [
    "Who created the Riverdale tv series?", "Who is the author of the book Lord of the Rings?",
    "What is the name of Manchester City FC's stadium?", "Which position played on team by Neymer?",
    "who wrote the lord of the ring book?", "Who is the lead singer of the band, Tool?",
    "Who was the producer of the movie Jurassic Park?", "Who wrote the novel Jurassic Park?",
    "Who directs The Ring?", "Which book is about Tool?", "Is Neymar from Gabon or Riverdale?",
    "Who is the author of The Lord of the Rings?", "Where is Gabon?",
]


@pytest.mark.parametrize("question", QUESTIONS)
def test_spots_what_the_pack_linker_spots(store_linker, question):
    pack = EntityLinker([dict(e) for e in ENTITIES])
    for k, mode in ((1, "default"), (3, "default"), (2, "exact")):
        assert [c.to_dict() for c in store_linker.spot(question, k=k, mode=mode)] == \
            [c.to_dict() for c in pack.spot(question, k=k, mode=mode)], (question, k, mode)


def test_a_typo_in_the_first_letters_is_found_through_the_tail_probe(store_linker):
    # "neimar" shares no first three letters with "neymar" but its last three: the bounded pool still has it
    assert [c.id for c in store_linker.spot("Which position played on team by Neimar?", k=1)] == ["Q142794"]


def test_link_labels_titles_and_the_entity_view(store_linker):
    pack = EntityLinker([dict(e) for e in ENTITIES])
    for mention, question in (("Jurassic Park", "Who wrote the novel Jurassic Park?"), ("Gabonn", None),
                              ("Q7", None), ("The Rings", "Who directs The Ring?")):
        assert [c.to_dict() for c in store_linker.link(mention, question, k=3)] == \
            [c.to_dict() for c in pack.link(mention, question, k=3)], mention
    assert store_linker.labels(["Q7", "Q571", "Q999"]) == {"Q7": "Gabon", "Q571": "book"}
    assert store_linker.title_to_qid("Riverdale (American TV series)") == "Q23001951"
    assert store_linker.title_to_qid("Jurassic Park (film)") is None  # three entities share the label
    assert "Q7" in store_linker.entities and "Q999" not in store_linker.entities
    assert store_linker.entities.get("Q7")["label"] == "Gabon" and len(store_linker.entities) == len(ENTITIES)


def test_wikidata_aliases_are_mentions(tmp_path):
    write_label_store(tmp_path / "l.sqlite", [{"id": "Q1", "label": "John F. Kennedy", "aliases": ["JFK Junior",
                                                                                                   "Jack Kennedy"]},
                                              {"id": "Q2", "label": "Kennedy", "degree": 3}])
    linker = LabelStoreLinker(tmp_path / "l.sqlite")
    assert [c.id for c in linker.spot("Where was Jack Kennedy born?", k=1)] == ["Q1"]
    # no label is close to the mention (the pack linker would find nothing): its alias names the entity
    assert [c.id for c in linker.link("JFK Junior", k=1)] == ["Q1"]


def test_same_links_as_the_pack_linker_on_the_real_pack(built_pack, tmp_path):
    from hqa.data.datasets import load_dataset

    entities = load_pack_entities(built_pack / "pack")
    write_label_store(tmp_path / "labels.sqlite", entities)
    store = LabelStoreLinker(tmp_path / "labels.sqlite")
    pack = EntityLinker([dict(e) for e in entities])
    questions = [r.question for r in load_dataset("compmix/test", limit=300)]
    differ = [q for q in questions if [c.id for c in store.spot(q, k=2)] != [c.id for c in pack.spot(q, k=2)]]
    assert differ == []
    linked = 0
    for q in questions[:100]:
        for cand in pack.spot(q, k=1):
            want = [c.id for c in pack.link(cand.mention, q, k=2)]
            if want:  # where no label is close, the store linker also answers from aliases (the pack linker not)
                linked += 1
                assert [c.id for c in store.link(cand.mention, q, k=2)] == want, cand.mention
    assert linked > 50
