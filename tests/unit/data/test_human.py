"""HumanIQ human traces: shipped copies, parsing, demo conversion, merge few-shots, malformed records."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from hqa.data.human import (
    DATASETS,
    HumanDemo,
    format_trajectory,
    load_human_library,
    load_merge_examples,
)
from hqa.data.store import require_dataset
from hqa.data.traces import Step
from hqa.errors import ConfigError, DataError

PKG_DATA = Path(__file__).resolve().parents[3] / "hqa" / "data" / "humaniq"
SHARED = require_dataset("humaniq-traces") / "humaniq"  # the pulled HumanIQ repository files (a mirror here)
EXPECTED_COUNTS = {"mintaka": 20, "qald": 19, "compmix": 20}
WIKIPEDIA_TOOLS = {"WikiSearch", "WikiSearchSummary"}
WIKIDATA_TOOLS = {"GetWikidataID", "GenerateSparql", "RunSparql", "GetLabel"}


def _raw(rel: str):
    return json.loads((PKG_DATA / rel).read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------------------------------
# shipped files
# ---------------------------------------------------------------------------------------------------------------------

SHIPPED = [
    ("mintaka.json", "data/mintaka.json"),
    ("qald.json", "data/qald.json"),
    ("compmix.json", "data/compmix.json"),
    ("merge_few_shot_examples.json", "data/merge_few_shot_examples.json"),
] + [
    (f"late_fusion/{ds}_{v}.json", f"data_late_fusion/{ds}_{v}.json")
    for ds in DATASETS
    for v in ("wikipedia", "wikidata")
]


@pytest.mark.parametrize("ours,theirs", SHIPPED)
def test_shipped_copy_is_byte_identical(ours, theirs):
    assert (PKG_DATA / ours).is_file(), ours
    assert SHARED.is_dir(), f"HumanIQ data folder {SHARED} is missing"
    assert (PKG_DATA / ours).read_bytes() == (SHARED / theirs).read_bytes()


def test_attribution_names_source_commit_and_license():
    text = (PKG_DATA / "ATTRIBUTION.md").read_text(encoding="utf-8")
    for needle in ("NIMI-research/Hybrid-QA", "884efd8d7f8091e71e66afb5e589c541924c367e", "Apache", "app/data/",
                   "app/data_late_fusion/"):
        assert needle in text
    assert "Apache License" in (PKG_DATA / "LICENSE-Apache-2.0.txt").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------------------------------
# full traces
# ---------------------------------------------------------------------------------------------------------------------


def test_all_59_full_traces_parse_with_declared_action_sequences():
    lib = load_human_library(strict=True)
    assert len(lib) == 59
    for ds, n in EXPECTED_COUNTS.items():
        demos = [d for d in lib if d.dataset == ds]
        records = _raw(f"{ds}.json")
        assert len(demos) == n == len(records)
        for i, (demo, rec) in enumerate(zip(demos, records)):
            assert demo.id == f"{ds}:{i}"
            assert demo.variant == "full" and demo.source == "human"
            assert demo.question == rec["Question"].strip()
            assert demo.actions == rec["Action_Sequence"].strip("\t").split("\t"), demo.id
            assert demo.actions == [s.action for s in demo.steps if s.action]
            assert demo.response, demo.id
            assert demo.wikidata_answer, demo.id


def test_full_trace_content_is_undoubled_and_split_into_fields():
    demo = next(d for d in load_human_library(["qald"]) if d.id == "qald:0")
    assert demo.question == "What is the location of the houses of parliament?"
    first = demo.steps[0]
    assert first.thought == "First, need to find information about houses of parliament"
    assert (first.action, first.action_input) == ("WikiSearch", "houses of parliament")
    assert first.observation.startswith("Page: Palace of Westminster")
    sparql = next(s for s in demo.steps if s.action == "GenerateSparql").observation
    assert "{ wd:Q62408" in sparql and "{{" not in sparql
    assert demo.actions[-1] == "GetLabel"


def test_dataset_selection_and_unknown_names():
    assert len(load_human_library(["qald"])) == 19
    assert len(load_human_library("compmix")) == 20
    with pytest.raises(ConfigError, match="unknown HumanIQ dataset"):
        load_human_library(["webqsp"])
    with pytest.raises(ConfigError, match="variant"):
        load_human_library(variant="both")


# ---------------------------------------------------------------------------------------------------------------------
# late-fusion variants
# ---------------------------------------------------------------------------------------------------------------------


def test_wikipedia_variant_parses_and_uses_only_wikipedia_tools():
    lib = load_human_library(variant="wikipedia", strict=True)
    assert [sum(d.dataset == ds for d in lib) for ds in DATASETS] == [20, 19, 20]
    for d in lib:
        assert d.id.startswith(f"{d.dataset}_wikipedia:")
        assert d.actions and set(d.actions) <= WIKIPEDIA_TOOLS, d.id
        assert d.wikidata_answer is None
        assert d.steps[-1].action == "" and d.steps[-1].thought  # closing thought, no tool


def test_wikidata_variant_parses_and_is_cut_down():
    lib = load_human_library(variant="wikidata", strict=True)
    full = {d.id: d for d in load_human_library()}
    assert len(lib) == 59
    with_wikipedia = set()
    for d in lib:
        assert d.actions, d.id
        assert d.wikidata_answer, d.id
        if set(d.actions) - WIKIDATA_TOOLS:
            with_wikipedia.add(d.id)
        twin = full[f"{d.dataset}:{d.id.split(':')[1]}"]
        assert twin.question == d.question
        assert len(d.actions) <= len(twin.actions)
    # Two "Wikidata-only" human traces still start with a WikiSearch step (as found in the data).
    assert with_wikipedia == {"qald_wikidata:10", "compmix_wikidata:10"}


def test_wikidata_variant_action_sequence_field_is_stale_and_ignored():
    stale = 0
    for ds in DATASETS:
        records = _raw(f"late_fusion/{ds}_wikidata.json")
        demos = load_human_library([ds], variant="wikidata")
        for rec, demo in zip(records, demos):
            stale += rec["Action_Sequence"].split() != demo.actions
    assert stale == 35


# ---------------------------------------------------------------------------------------------------------------------
# demos as dspy examples
# ---------------------------------------------------------------------------------------------------------------------


def test_format_trajectory_exact_text():
    steps = [
        Step(thought="look it up", action="WikiSearch", action_input="aerosmith", observation="Page: Aerosmith"),
        Step(thought="done"),
    ]
    assert format_trajectory(steps) == (
        "Thought: look it up\nAction: WikiSearch\nAction Input: aerosmith\nObservation: Page: Aerosmith"
        "\n\nThought: done"
    )
    assert format_trajectory([]) == ""


def test_demo_dict_round_trip():
    for demo in load_human_library(["compmix"]):
        d = demo.to_dict()
        json.dumps(d)
        assert HumanDemo.from_dict(json.loads(json.dumps(d))) == demo


# ---------------------------------------------------------------------------------------------------------------------
# merge few-shots
# ---------------------------------------------------------------------------------------------------------------------


def test_merge_examples_parse():
    counts = {ds: len(load_merge_examples(ds)) for ds in DATASETS}
    assert counts == {"mintaka": 5, "qald": 6, "compmix": 7}
    fields = {"question", "wikipedia_answer", "wikidata_answer", "internal_knowledge", "context", "answer"}
    for ds in DATASETS:
        for ex in load_merge_examples(ds):
            assert fields <= set(ex.keys()) and ex.source == "human"
            assert all(ex[f] for f in fields)
            assert not any(f"{label}:" in ex.context for label in ("Question", "Answer"))


def test_merge_examples_read_both_label_spellings():
    qald = load_merge_examples("qald")
    # "Wikipedia Answer: 9,209,944" and "Wikipedia answer : April 23, 1616" both occur in the file
    shakespeare = next(e for e in qald if "Shakespeare" in e.question)
    assert (shakespeare.wikipedia_answer, shakespeare.wikidata_answer) == ("April 23, 1616", "23 April 1616")
    assert shakespeare.answer == "23 April 1616"
    mexico = next(e for e in qald if "mexico" in e.question)
    assert (mexico.wikipedia_answer, mexico.wikidata_answer, mexico.internal_knowledge) == (
        "9,209,944", "9209944", "9,000,000")
    first = load_merge_examples("mintaka")[0]
    assert first.question == "When did aerosmith form?" and first.answer == "1970"
    assert first.context.startswith("Aerosmith is an American rock band")


# ---------------------------------------------------------------------------------------------------------------------
# malformed input
# ---------------------------------------------------------------------------------------------------------------------

GOOD = {
    "Question": "Who discovered ceres?",
    "Dataset": "Qald",
    "Action_Sequence": "\tWikiSearch",
    "One_Shot": "Question:Who discovered ceres?\n\nThought:search\n\nAction:WikiSearch\n\nAction Input: ceres\n\n"
    "Observation: Page: Ceres\nFinal Answer: Wikipedia_Answer: Giuseppe Piazzi, Wikidata_Answer: [None]\n\n"
    "Assistant Response: Giuseppe Piazzi.",
}


@pytest.fixture
def broken_dir(tmp_path):
    records = [
        GOOD,
        {**GOOD, "Question": ""},  # 1: empty question
        {k: v for k, v in GOOD.items() if k != "One_Shot"},  # 2: no One_Shot
        {**GOOD, "One_Shot": "Question: Who discovered ceres?\nFinal Answer: Piazzi"},  # 3: no steps
        ["not", "a", "record"],  # 4
    ]
    (tmp_path / "qald.json").write_text(json.dumps(records), encoding="utf-8")
    return tmp_path


def test_malformed_records_are_skipped_with_a_message(broken_dir, caplog):
    with caplog.at_level(logging.WARNING, logger="hqa.data.human"):
        lib = load_human_library(["qald"], path=broken_dir)
    assert [d.id for d in lib] == ["qald:0"]
    assert lib[0].actions == ["WikiSearch"] and lib[0].wikipedia_answer == "Giuseppe Piazzi"
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 4
    for idx, reason in [(1, "Question"), (2, "One_Shot"), (3, "no Thought/Action steps"), (4, "not an object")]:
        msg = messages[idx - 1]
        assert "qald.json" in msg and f"record {idx}:" in msg and reason in msg


def test_malformed_record_strict_raises_data_error_naming_file_and_index(broken_dir):
    with pytest.raises(DataError) as info:
        load_human_library(["qald"], path=broken_dir, strict=True)
    msg = str(info.value)
    assert "qald.json" in msg and "record 1:" in msg and "Question" in msg
    assert "\n" not in msg


def test_missing_or_invalid_files_raise_data_error(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_human_library(["mintaka"], path=tmp_path)
    (tmp_path / "mintaka.json").write_text("[{", encoding="utf-8")
    with pytest.raises(DataError, match="not valid JSON"):
        load_human_library(["mintaka"], path=tmp_path)
    (tmp_path / "mintaka.json").write_text('{"Question": "x"}', encoding="utf-8")
    with pytest.raises(DataError, match="expected a JSON list"):
        load_human_library(["mintaka"], path=tmp_path)
    (tmp_path / "merge_few_shot_examples.json").write_text('{"qald": "Question: x?\\nAnswer: y"}', encoding="utf-8")
    with pytest.raises(DataError, match="missing"):
        load_merge_examples("qald", path=tmp_path)
    with pytest.raises(DataError, match="no few-shot text"):
        load_merge_examples("mintaka", path=tmp_path)
