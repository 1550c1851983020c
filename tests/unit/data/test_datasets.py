"""Tests for hqa.data.datasets: the real data (counts, spot checks; from the data directory, filled from the mirror
here), fixture files in the origins' formats, and broken files (DataError messages)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hqa.data import datasets as ds
from hqa.data.datasets import (
    DATASET_SPECS,
    QARecord,
    load_bamboogle,
    load_compmix,
    load_dataset,
    load_humaniq_questions,
    load_mintaka,
    load_qald10,
    load_qald9plus,
    question_key,
)
from hqa.errors import DataError, HQAError

FIXTURES = Path(__file__).parent.parent.parent / "fixtures" / "data"


@pytest.fixture(scope="module")
def compmix_test() -> list[QARecord]:
    return load_compmix("test")


def _by_id(records: list[QARecord]) -> dict[str, QARecord]:
    return {r.id: r for r in records}


# ------------------------------------------------------------------------------------------ real data: counts


@pytest.mark.parametrize(
    ("spec", "count"),
    [
        ("compmix/test", 2764),
        ("compmix/dev", 1680),
        ("compmix/train", 4966),
        ("qald10", 394),
        ("qald9plus", 150),
        ("bamboogle", 125),
        ("mintaka", 24),
        # SOURCES.md: 188 of HumanIQ's compmix.txt questions are in the CompMix test set.
        ("humaniq-compmix", 188),
    ],
)
def test_real_counts(spec: str, count: int) -> None:
    records = load_dataset(spec)
    assert len(records) == count
    assert len({r.id for r in records}) == count
    assert all(r.question and isinstance(r.answers, tuple) for r in records)


def test_compmix_splits_have_gold_and_disjoint_ids() -> None:
    ids = [{r.id for r in load_compmix(s)} for s in ("test", "dev", "train")]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])


@pytest.mark.parametrize(
    ("name", "count"), [("mintaka", 200), ("compmix", 199), ("qald_full", 200), ("qald", 47), ("qald_trial", 41)]
)
def test_humaniq_question_lists(name: str, count: int) -> None:
    questions = load_humaniq_questions(name)
    assert len(questions) == count
    assert all(q == q.strip() and q for q in questions)


def test_limit_keeps_first_records(compmix_test: list[QARecord]) -> None:
    assert load_dataset("compmix/test", limit=3) == compmix_test[:3]
    assert load_dataset("bamboogle", limit=0) == []


# ------------------------------------------------------------------------------------------ real data: records


def test_compmix_megan_rapinoe(compmix_test: list[QARecord]) -> None:
    by_id = _by_id(compmix_test)
    rec = by_id["compmix:8750"]
    assert rec.question == "Where was was female soccer player Megan Rapinoe born?"
    assert rec.answers == ("Redding",)
    assert rec.answer_ids == ("Q495361",)
    assert rec.dataset == "compmix"
    assert rec.meta["domain"] == "soccer"
    assert rec.meta["answer_src"] == "infobox"
    assert rec.meta["entities"] == [{"id": "Q260725", "label": "Megan Rapinoe"}]
    # Date answer: the id is a timestamp, not a QID, so answer_ids is empty.
    year = by_id["compmix:8749"]
    assert year.answers == ("1985",)
    assert year.answer_ids == ()


def test_compmix_answer_ids_are_qids(compmix_test: list[QARecord]) -> None:
    assert all(a.startswith("Q") and a[1:].isdigit() for r in compmix_test for a in r.answer_ids)
    # Non-entity answers (dates, numbers, yes/no) exist and carry no ids.
    assert any(not r.answer_ids for r in compmix_test)
    assert any(r.answers == ("yes",) for r in compmix_test)


def test_qald10_records() -> None:
    by_id = _by_id(load_qald10())
    first = by_id["qald10:0"]
    assert first.question == "After whom is the Riemannian geometry named?"
    assert first.answers == ("Q42299",) and first.answer_ids == ("Q42299",)
    assert "wdt:P138" in first.meta["sparql"]
    assert by_id["qald10:7"].answers == ("yes",)  # boolean ASK
    assert by_id["qald10:8"].answers == ("+100",) and by_id["qald10:8"].answer_ids == ()  # decimal literal
    assert by_id["qald10:38"].answers == ("Amerika Birleşik Devletleri",)  # language-tagged literal
    # A non-Wikidata URI is kept whole and is not an id.
    assert by_id["qald10:345"].answers == ("https://www.npr.org/series/tiny-desk-concerts/",)
    assert by_id["qald10:345"].answer_ids == ()


def test_qald9plus_records() -> None:
    records = load_qald9plus()
    by_id = _by_id(records)
    assert by_id["qald9plus:99"].question == "What is the time zone of Salt Lake City?"
    assert by_id["qald9plus:99"].answers == ("Mountain Time Zone",)
    assert by_id["qald9plus:99"].answer_ids == ()
    assert by_id["qald9plus:122"].answers == ("Mary Todd Lincoln",)
    assert by_id["qald9plus:143"].answers == ("030",)  # plain literal keeps its leading zero
    # Percent-encoded resource names are decoded, and a slash inside a resource name is kept.
    assert '"Scarface" John Williams' in by_id["qald9plus:63"].answers
    all_answers = {a for r in records for a in r.answers}
    assert "Would You Marry Me?" in all_answers
    assert "Mercedes 15/70/100 PS" in all_answers
    # The file has 35 questions whose stored DBpedia result set is empty.
    assert sum(1 for r in records if not r.answers) == 35


def test_bamboogle_records() -> None:
    records = load_bamboogle()
    assert [r.id for r in records[:3]] == ["bamboogle:0", "bamboogle:1", "bamboogle:2"]
    rec = records[1]
    assert rec.question == "What rocket was the first spacecraft that ever approached Uranus launched on?"
    assert rec.answers == ("Titan IIIE",)
    assert rec.meta["decomposition"] == [
        {"question": "What was the first spacecraft that ever approached Uranus?", "answers": ["voyager 2"]},
        {"question": "What rocket was Voyager 2 launched on?", "answers": ["titan iiie-centaur", "titan iiie"]},
    ]
    assert all(len(r.meta["decomposition"]) == 2 for r in records)


def test_mintaka_records() -> None:
    by_id = _by_id(load_mintaka())
    rec = by_id["mintaka:9ace9041"]
    assert rec.answers == ("Breaking Dawn",) and rec.answer_ids == ("Q53945",)
    assert rec.meta["category"] == "books" and rec.meta["complexityType"] == "ordinal"
    assert rec.meta["questionEntity"][0]["name"] == "Q44523"
    assert by_id["mintaka:26ebd827"].answers == ("yes",)
    assert by_id["mintaka:db942bdc"].answers == ("no",)
    # Count question: the gold is the count; the counted entities move to meta.
    count = by_id["mintaka:88bdb808"]
    assert count.answers == ("6",) and count.answer_ids == ()
    assert len(count.meta["answer_entities"]) == 6
    # Multi-answer entity question keeps every label and QID.
    assert len(by_id["mintaka:d2a31098"].answers) == 2
    assert by_id["mintaka:d2a31098"].answer_ids == ("Q904928", "Q1710023")


def test_humaniq_compmix_matches_whitespace_variants() -> None:
    records = load_dataset("humaniq-compmix")
    questions = {r.question for r in records}
    # "F9 ?" in CompMix vs "F9?" in HumanIQ's list: matched because the key drops whitespace.
    assert "When publication date of the movie F9 ?" in questions
    wanted = {question_key(q) for q in load_humaniq_questions("compmix")}
    assert all(question_key(r.question) in wanted for r in records)
    assert all(r.dataset == "compmix" for r in records)


def test_to_example(compmix_test: list[QARecord]) -> None:
    ex = compmix_test[0].to_example()
    assert ex.question == compmix_test[0].question
    assert ex.answers == ["Redding"] and ex.answer_ids == ["Q495361"]
    assert ex.id == "compmix:8750" and ex.dataset == "compmix"
    assert set(ex.inputs().keys()) == {"question"}
    assert set(ex.labels().keys()) == {"answer", "answers", "answer_ids", "id", "dataset", "gold_entities",
                                       "decomposition"}
    assert ex.answer == "Redding"  # the first gold answer: what a labeled demo of an `answer` predictor shows
    assert ex.gold_entities == ["Q260725"] and ex.decomposition is None  # Megan Rapinoe; CompMix has no decomposition


def test_gold_entities_per_dataset() -> None:
    from hqa.data.datasets import load_dataset

    bam = load_dataset("bamboogle", limit=1)[0].to_example()
    assert bam.gold_entities == [] and bam.decomposition[0]["answers"] == ["1812"]
    qald = load_dataset("qald10", limit=1)[0]
    assert qald.question_entities() == ["Q761383"]  # the constant of its gold query (Riemannian geometry)
    mintaka = load_dataset("mintaka", limit=1)[0]
    assert mintaka.question_entities() == ["Q44523"]  # Twilight; the ordinal "4" is not an entity


# ------------------------------------------------------------------------------------------ location


def test_data_dir_setting_and_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hqa.data.store import data_dir

    monkeypatch.setenv("HQA_PATHS__DATA", str(tmp_path / "d"))
    assert data_dir() == tmp_path / "d"
    monkeypatch.delenv("HQA_PATHS__DATA")
    monkeypatch.setenv("HQA_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    monkeypatch.setenv("HQA_CACHE_DIR", str(tmp_path / "cache"))
    assert data_dir() == tmp_path / "cache" / "data"  # the user cache, outside any checkout


def test_missing_dataset_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No file, no mirror, an origin nobody answers: one line naming the dataset and the two ways to get it."""
    monkeypatch.setenv("HQA_PATHS__DATA", str(tmp_path / "d"))
    monkeypatch.delenv("HQA_DATA_MIRROR", raising=False)
    monkeypatch.setenv("HQA_PATHS__DATA_MIRROR", "")
    monkeypatch.setenv("HQA_HTTP__MAX_RETRIES", "0")
    monkeypatch.setenv("HQA_DATA_ORIGIN_GITHUB", "http://127.0.0.1:9")  # discard port: connection refused
    with pytest.raises(DataError) as err:
        load_bamboogle()
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("dataset bamboogle is not in")
    assert "hqa data pull bamboogle" in msg and "HQA_DATA_MIRROR" in msg


def test_missing_explicit_file_names_path(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        load_bamboogle(tmp_path / "bamboogle.json")
    assert "bamboogle.json" in str(err.value) and "not found" in str(err.value)


# ------------------------------------------------------------------------------------------ origin-format fixtures


def test_mintaka_release_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mintaka_{split}.json as released (a JSON list with translations): count questions answer with answerNum,
    booleans yes/no, entities by label with their QIDs; ``--dataset mintaka/test`` reads it from the data dir."""
    records = ds.load_mintaka_split("test", FIXTURES / "mintaka_test.json")
    assert [r.id for r in records] == ["mintaka:fx000001", "mintaka:fx000002", "mintaka:fx000003"]
    assert records[0].answers == ("2",) and records[0].meta["answer_entities"][0]["id"] == "Q7547"
    assert records[1].answers == ("yes",) and records[1].question_entities() == ["Q3392", "Q1653"]
    assert records[2].answers == ("George Orwell",) and records[2].answer_ids == ("Q3335",)
    (tmp_path / "mintaka").mkdir()
    (tmp_path / "mintaka" / "mintaka_test.json").write_bytes((FIXTURES / "mintaka_test.json").read_bytes())
    monkeypatch.setenv("HQA_PATHS__DATA", str(tmp_path))
    assert [r.id for r in load_dataset("mintaka/test", limit=2)] == ["mintaka:fx000001", "mintaka:fx000002"]
    with pytest.raises(DataError, match="unknown Mintaka split"):
        ds.load_mintaka_split("validation")


def test_qald9plus_wikidata_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """QALD-9-plus on Wikidata: QIDs as answers and answer ids, booleans, literals; gold entities from full URIs."""
    records = ds.load_qald9plus_wikidata("test", FIXTURES / "qald_9_plus_test_wikidata.json")
    assert [(r.id, r.answers, r.answer_ids) for r in records] == [
        ("qald9plus-wikidata:901", ("Q6574",), ("Q6574",)),
        ("qald9plus-wikidata:902", ("yes",), ()),
        ("qald9plus-wikidata:903", ("437619",), ())]
    assert records[0].question_entities() == ["Q1764"] and records[1].question_entities() == ["Q183", "Q64"]
    (tmp_path / "qald9plus").mkdir()
    (tmp_path / "qald9plus" / "qald_9_plus_test_wikidata.json").write_bytes(
        (FIXTURES / "qald_9_plus_test_wikidata.json").read_bytes())
    monkeypatch.setenv("HQA_PATHS__DATA", str(tmp_path))
    assert len(load_dataset("qald9plus-wikidata")) == 3


def test_compmix_release_zip(tmp_path: Path) -> None:
    """CompMix's own release: {split}_set.zip holding {split}_set.jsonl in the UniHGKR copy's record schema."""
    import zipfile

    with zipfile.ZipFile(tmp_path / "test_set.zip", "w") as zf:
        zf.write(FIXTURES / "compmix_test_set.jsonl", "test_set.jsonl")
    records = ds.load_compmix_release("test", tmp_path / "test_set.zip")
    assert [(r.id, r.answers, r.answer_ids) for r in records] == [
        ("compmix:fx-1", ("Santos FC",), ("Q80964",)), ("compmix:fx-2", ("1979",), ())]
    with zipfile.ZipFile(tmp_path / "bad.zip", "w") as zf:
        zf.writestr("other.jsonl", "{}")
    with pytest.raises(DataError, match="no member 'test_set.jsonl'"):
        ds.load_compmix_release("test", tmp_path / "bad.zip")
    with zipfile.ZipFile(tmp_path / "latin1.zip", "w") as zf:
        zf.writestr("test_set.jsonl", '{"question": "caf'.encode() + b"\xe9" + b'"}\n')
    with pytest.raises(DataError, match=r"latin1.zip!test_set.jsonl: not valid UTF-8 \(byte 0xe9 at offset 17, line 1\)"):
        ds.load_compmix_release("test", tmp_path / "latin1.zip")


# ------------------------------------------------------------------------------------------ broken files


def _compmix_rec(qid: str, question: str = "Who?", label: str = "X") -> dict:
    return {"question_id": qid, "question": question, "answers": [{"id": "Q1", "label": label}]}


def _write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_valid_tmp_file_loads(tmp_path: Path) -> None:
    path = _write_json(tmp_path / "ok.json", [_compmix_rec("1"), _compmix_rec("2", label="2021")])
    records = load_compmix("dev", path=path)
    assert [r.id for r in records] == ["compmix:1", "compmix:2"]
    assert records[1].answers == ("2021",) and records[1].meta["split"] == "dev"


def test_missing_field(tmp_path: Path) -> None:
    bad = _compmix_rec("7")
    del bad["question"]
    path = _write_json(tmp_path / "missing_field.json", [_compmix_rec("1"), bad])
    with pytest.raises(DataError) as err:
        load_compmix(path=path)
    msg = str(err.value)
    assert "missing_field.json" in msg and "record 1" in msg and "'7'" in msg and "'question'" in msg
    assert "\n" not in msg
    assert isinstance(err.value, HQAError)


def test_missing_id_field_names_index(tmp_path: Path) -> None:
    path = _write_json(tmp_path / "noid.json", [_compmix_rec("1"), {"question": "q", "answers": []}])
    with pytest.raises(DataError, match=r"noid\.json: record 1: missing required field 'question_id'"):
        load_compmix(path=path)


def test_wrong_field_type(tmp_path: Path) -> None:
    bad = _compmix_rec("3")
    bad["answers"] = "X"
    path = _write_json(tmp_path / "wrongtype.json", [bad])
    with pytest.raises(DataError, match=r"wrongtype\.json: record 0 \(id '3'\): field 'answers' must be list"):
        load_compmix(path=path)


def test_bad_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('[{"question_id": "1",\n "question": }]', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.json: invalid JSON at line 2"):
        load_compmix(path=path)


def test_bad_jsonl_line(tmp_path: Path) -> None:
    good = {"id": "a", "question": "q?", "answer": {"answerType": "boolean", "answer": [True]}}
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(good) + "\n\n{not json}\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.jsonl:3: not valid JSON"):
        load_mintaka(path=path)


def test_latin1_bytes(tmp_path: Path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(json.dumps([_compmix_rec("1", question="Où est Zürich?")], ensure_ascii=False).encode("latin-1"))
    with pytest.raises(DataError) as err:
        load_compmix(path=path)
    assert "latin1.json" in str(err.value) and "UTF-8" in str(err.value)


def test_latin1_text_list(tmp_path: Path) -> None:
    path = tmp_path / "questions.txt"
    path.write_bytes("first?\nCaf\xe9?\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"questions\.txt: not valid UTF-8 .*line 2"):
        load_humaniq_questions("compmix", path=path)


def test_duplicate_ids(tmp_path: Path) -> None:
    path = _write_json(tmp_path / "dups.json", [_compmix_rec("5"), _compmix_rec("6"), _compmix_rec("5")])
    with pytest.raises(DataError) as err:
        load_compmix(path=path)
    msg = str(err.value)
    assert "dups.json" in msg and "record 2" in msg and "compmix:5" in msg and "duplicate" in msg


def test_qald_duplicate_and_missing_english(tmp_path: Path) -> None:
    def q(qid: object, lang: str = "en") -> dict:
        return {"id": qid, "question": [{"language": lang, "string": "Is it?"}], "answers": [{"boolean": True}]}

    dup = _write_json(tmp_path / "qdup.json", {"questions": [q(1), q("1")]})
    with pytest.raises(DataError, match=r"qdup\.json: record 1: duplicate id 'qald10:1'"):
        load_qald10(path=dup)
    no_en = _write_json(tmp_path / "qde.json", {"questions": [q(1), q(2, "de")]})
    with pytest.raises(DataError, match=r"qde\.json: record 1 \(id '2'\): no 'en' question string"):
        load_qald10(path=no_en)
    ok = load_qald10(path=_write_json(tmp_path / "qok.json", {"questions": [q(4)]}))
    assert ok[0].answers == ("yes",) and ok[0].meta["answer_type"] == "boolean"


def test_qald_bad_answers_block(tmp_path: Path) -> None:
    rec = {"id": "9", "question": [{"language": "en", "string": "Who?"}], "answers": [{"head": {}}]}
    path = _write_json(tmp_path / "qbad.json", {"questions": [rec]})
    with pytest.raises(DataError, match=r"qbad\.json: record 0 \(id '9'\): answers\[0\] has neither"):
        load_qald9plus(path=path)


def test_qald9plus_uri_mapping(tmp_path: Path) -> None:
    bindings = [
        {"uri": {"type": "uri", "value": "http://dbpedia.org/resource/Barack_Obama"}},
        {"uri": {"type": "uri", "value": "http://dbpedia.org/resource/Caf%C3%A9_de_Flore"}},
        {"uri": {"type": "typed-literal", "value": "1961-08-04"}},
    ]
    rec = {
        "id": "1",
        "question": [{"language": "en", "string": "Who?"}],
        "answers": [{"head": {"vars": ["uri"]}, "results": {"bindings": bindings}}],
    }
    records = load_qald9plus(path=_write_json(tmp_path / "q9.json", {"questions": [rec]}))
    assert records[0].answers == ("Barack Obama", "Café de Flore", "1961-08-04")
    assert records[0].meta["answer_type"] == "mixed"


def test_top_level_shape(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"shape\.json: expected a JSON list"):
        load_bamboogle(path=_write_json(tmp_path / "shape.json", {"Question": "q"}))
    with pytest.raises(DataError, match=r"qshape\.json: expected a JSON object with a 'questions' list"):
        load_qald10(path=_write_json(tmp_path / "qshape.json", []))


def test_bamboogle_missing_answer(tmp_path: Path) -> None:
    rows = [{"Question": "a?", "Answer": "x"}, {"Question": "b?"}]
    with pytest.raises(DataError, match=r"bam\.json: record 1 \(id 'bamboogle:1'\): missing required field 'Answer'"):
        load_bamboogle(path=_write_json(tmp_path / "bam.json", rows))


def test_unknown_spec_lists_valid_specs() -> None:
    with pytest.raises(DataError) as err:
        load_dataset("compmix/validation")
    msg = str(err.value)
    assert "compmix/validation" in msg
    assert all(spec in msg for spec in DATASET_SPECS)


def test_unknown_split_and_list() -> None:
    with pytest.raises(DataError, match="test, dev, train"):
        load_compmix("valid")
    with pytest.raises(DataError, match="qald_full"):
        load_humaniq_questions("webqsp")


# ------------------------------------------------------------------------------------------ splitting


def test_module_exports() -> None:
    assert set(ds.__all__) <= set(dir(ds))
