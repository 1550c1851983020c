"""Answerable subsets on a hand-built pack where the expected subset is known question by question."""

from __future__ import annotations

import json

import pytest

from hqa.data import datasets as D
from hqa.data.answerable import AnswerableIndex, answerable_ids, value_key
from hqa.data.datasets import QARecord
from hqa.world.pack.collect import PackContents
from hqa.world.pack.write import write_pack
from hqa.errors import DataError

WD = "<http://www.wikidata.org/entity/{}>"
WDT = "<http://www.wikidata.org/prop/direct/{}>"


def _pack(tmp_path, passages=(("Animal Farm", "Animal Farm is a novella by George Orwell. Yes, a novella."),)):
    c = PackContents()
    for qid, label in (("Q1", "Animal Farm"), ("Q2", "George Orwell"), ("Q3", "Redding"), ("Q4", "Megan Rapinoe"),
                       ("Q5", "Florence"), ("Q6", "Stadio Artemio Franchi"), ("Q7", "Gabon"), ("Q8", "Libreville"),
                       ("Q9", "Patrick Stewart"), ("P50", "author")):
        c.add_label(qid, label, "test")
    c.facts[(WD.format("Q1"), WDT.format("P50"), WD.format("Q2"))].add("test")          # Animal Farm author Orwell
    c.facts[(WD.format("Q6"), WDT.format("P131"), WD.format("Q5"))].add("test")         # stadium located in Florence
    c.facts[(WD.format("Q9"), WDT.format("P569"),
             '"1940-07-13T00:00:00+00:00"^^<http://www.w3.org/2001/XMLSchema#dateTime>')].add("test")
    for title, text in passages:
        c.passages[(title, text)].add("test")
    write_pack(c, tmp_path / "pack")
    return tmp_path / "pack"


def rec(rid, question, answers, answer_ids=(), entities=(), raw_ids=()):
    meta = {"entities": [{"id": e, "label": ""} for e in entities], "raw_answer_ids": list(raw_ids)}
    return QARecord(f"toy:{rid}", question, tuple(answers), tuple(answer_ids), "toy", meta)


RECORDS = [
    rec("kg-id", "Who wrote Animal Farm?", ["George Orwell"], ["Q2"], ["Q1"]),                       # KG forward
    rec("kg-reverse", "Florence's soccer stadium?", ["Stadio Artemio Franchi"], ["Q6"], ["Q5"]),     # KG reverse
    rec("kg-date", "When was Patrick Stewart born?", ["13 July 1940"], [], ["Q9"]),                  # date literal
    rec("text", "Who wrote the book Animal Farm?", ["George Orwell"], [], ["Q1"]),                   # label only
    rec("no-anchor", "Where was Rapinoe born?", ["Redding"], ["Q3"], ["Q999"]),       # answer in pack, anchor not
    rec("no-path", "Where was Megan Rapinoe born?", ["Redding"], ["Q3"], ["Q4"]),     # both in pack, not connected
    rec("yes-no", "Is George Orwell the author of Animal Farm?", ["yes"], [], ["Q1"]),
    rec("wrong-date", "When was Patrick Stewart born?", ["14 July 1940"], [], ["Q9"]),
    rec("spotted", "What is the capital of Gabon?", ["Libreville"], ["Q8"]),        # no gold entities: n-gram anchor
]


def test_expected_subset_and_reasons(tmp_path):
    pack = _pack(tmp_path)
    index = AnswerableIndex.from_pack(pack)
    reasons = {r.id.split(":")[1]: index.reason(r) for r in RECORDS}
    assert reasons["kg-id"] == {"anchor": "Q1", "via": "kg", "answer": "Q2"}
    assert reasons["kg-reverse"] == {"anchor": "Q5", "via": "kg", "answer": "Q6"}
    assert reasons["kg-date"] == {"anchor": "Q9", "via": "kg", "answer": "1940-07-13"}
    assert reasons["text"]["via"] in ("kg", "text")  # "George Orwell" is Q2's label → KG hit by label
    assert [k for k, v in reasons.items() if v is None] == ["no-anchor", "no-path", "yes-no", "wrong-date", "spotted"]
    assert answerable_ids(RECORDS, pack) == ["toy:kg-id", "toy:kg-reverse", "toy:kg-date", "toy:text"]


def test_a_gold_id_the_pack_does_not_label_is_reachable_but_not_named(tmp_path):
    pack = _pack(tmp_path)
    index = AnswerableIndex.from_pack(pack)
    unnamed = rec("kg-unnamed", "What is Animal Farm's genre?", ["fable"], ["Q77"], ["Q1"])
    c = PackContents()
    c.add_label("Q1", "Animal Farm", "test")
    c.facts[(WD.format("Q1"), WDT.format("P136"), WD.format("Q77"))].add("test")  # Q77 has no label
    write_pack(c, tmp_path / "unnamed")
    bare = AnswerableIndex.from_pack(tmp_path / "unnamed")
    assert bare.reason(unnamed) == {"anchor": "Q1", "via": "kg", "answer": "Q77"}
    assert bare.reason(unnamed, named=True) is None
    for r in RECORDS:  # every route of the hand-built pack has a label, a literal or a passage
        assert index.reason(r, named=True) == index.reason(r)


def test_text_route_needs_anchor_and_answer_in_one_passage(tmp_path):
    passages = (("Megan Rapinoe", "Megan Rapinoe was born in Redding, California."),
                ("Libreville", "Libreville is a city."))  # answer without the anchor's label: not a route
    pack = _pack(tmp_path, passages)
    index = AnswerableIndex.from_pack(pack)
    by_id = {r.id.split(":")[1]: r for r in RECORDS}
    reason = index.reason(by_id["no-path"])
    assert reason == {"anchor": "Q4", "via": "text", "answer": "redding", "passage": reason["passage"]}
    assert index.passages[reason["passage"]].startswith("megan rapinoe")
    assert index.reason(by_id["spotted"]) is None
    assert index.anchors(by_id["spotted"]) == ["Q7"]


def test_value_keys():
    assert value_key("1940-07-13T00:00:00+00:00") == value_key("13 July 1940") == value_key("July 13, 1940")
    assert value_key("35.0") == value_key("+35") == "35"
    assert value_key("Stadio  Artemio-Franchi") == "stadio artemio franchi"


@pytest.fixture()
def toy_spec(monkeypatch):
    monkeypatch.setitem(D.DATASET_SPECS, "toy", lambda: list(RECORDS))
    return "toy"


def test_spec_modifier_filters_then_limits(tmp_path, toy_spec):
    pack = _pack(tmp_path)
    assert len(D.load_dataset("toy")) == len(RECORDS)
    kept = D.load_dataset("toy:answerable", pack_dir=pack)
    assert [r.id for r in kept] == ["toy:kg-id", "toy:kg-reverse", "toy:kg-date", "toy:text"]
    assert [r.id for r in D.load_dataset("toy:answerable", limit=2, pack_dir=pack)] == ["toy:kg-id", "toy:kg-reverse"]
    with pytest.raises(DataError, match="unknown dataset modifier 'solvable'"):
        D.load_dataset("toy:solvable", pack_dir=pack)


def test_default_pack_comes_from_settings(tmp_path, toy_spec, monkeypatch):
    pack = _pack(tmp_path)
    monkeypatch.setenv("HQA_PATHS__ARTIFACTS", str(tmp_path))
    assert len(D.load_dataset("toy:answerable")) == 4


def test_cache_is_used_and_invalidated_by_pack_version(tmp_path, monkeypatch):
    pack = _pack(tmp_path)
    first = answerable_ids(RECORDS, pack, "toy")
    cache = json.loads((pack / "answerable.json").read_text())
    assert list(cache["sets"].values())[0]["ids"] == first

    def boom(*_a, **_k):
        raise AssertionError("recomputed although cached")

    monkeypatch.setattr(AnswerableIndex, "from_pack", classmethod(boom))
    assert answerable_ids(RECORDS, pack, "toy") == first  # served from the cache
    manifest = json.loads((pack / "manifest.json").read_text())
    manifest["version"] = "another-pack"
    (pack / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(AssertionError, match="recomputed"):
        answerable_ids(RECORDS, pack, "toy")


def test_read_only_pack_still_answers(tmp_path, monkeypatch):
    pack = _pack(tmp_path)
    import hqa.data.answerable as A
    import hqa.io.files

    def deny(*_a, **_k):
        raise PermissionError("read-only")

    monkeypatch.setattr(hqa.io.files.tempfile, "mkstemp", deny)
    assert A.answerable_ids(RECORDS, pack, "toy") == ["toy:kg-id", "toy:kg-reverse", "toy:kg-date", "toy:text"]
    assert not (pack / "answerable.json").exists()


def test_page_route_reads_the_page_about_a_gold_entity_the_pack_does_not_know(tmp_path):
    """Definition 2 (the Wikipedia leads): a passage titled with a gold entity's name (its dataset label; the entity
    need not be a pack entity) that holds a gold answer makes the question answerable; a page about another entity
    holding the answer, or the entity's page without it, does not."""
    pack = _pack(tmp_path, passages=(("Neil Armstrong", "Neil Armstrong was an American astronaut born in Wapakoneta, "
                                      "Ohio."), ("Apollo 11 (mission)", "Apollo 11 landed in 1969."),
                                     ("Buzz Aldrin", "Buzz Aldrin flew with a man born in Wapakoneta.")))
    index = AnswerableIndex.from_pack(pack)

    def named(rid, question, answers, label, qid="Q100"):
        return QARecord(f"toy:{rid}", question, tuple(answers), (), "toy",
                        {"entities": [{"id": qid, "label": label}]})

    hit = named("page", "Where was Neil Armstrong born?", ["Wapakoneta"], "Neil Armstrong")
    reason = index.reason(hit)
    assert reason == {"anchor": "neil armstrong", "via": "page", "answer": "wapakoneta", "passage": reason["passage"]}
    assert index.passages[reason["passage"]].startswith("neil armstrong neil armstrong was")
    disamb = named("disamb", "When did Apollo 11 land?", ["1969"], "Apollo 11")
    assert index.reason(disamb)["via"] == "page"  # the title's "(mission)" is dropped
    assert index.reason(named("other-page", "Where was Jim born?", ["Wapakoneta"], "Jim Lovell")) is None
    assert index.reason(named("no-answer", "Where did Neil Armstrong die?", ["Cincinnati"], "Neil Armstrong")) is None
