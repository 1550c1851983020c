"""Reading the recorded sources into :class:`PackContents`: every step of every recorded solution process (human
traces and late-fusion logs), the SQUALL few-shots' entity tables, the property table for properties labelled nowhere
else, and CompMix's evidence texts (:func:`collect`, one step each)."""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from hqa.data import wikidata as W
from hqa.data.datasets import read_json
from hqa.data.traces import Trace, parse_trace
from hqa.errors import DataError
from hqa.world.pack.observations import (
    facts_from_sparql,
    labels_from_observation,
    parse_result_rows,
    passages_from_observation,
    qualifiers_from_sparql,
    titles_from_observation,
)

_SEARCH_ACTIONS = {"WikiSearch", "WikiSearchSummary", "Read"}
_SQUALL_TOKEN = re.compile(r"<([QP]\d+):([^>]+)>")


@dataclass
class PackContents:
    facts: dict[tuple[str, str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    labels: dict[str, tuple[str, set[str]]] = field(default_factory=dict)
    descriptions: dict[str, tuple[str, set[str]]] = field(default_factory=dict)
    passages: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    # qualified statements: (subject or "", Pn, value, Pm, qualifier value) as N-Triples / ids → sources
    qualifiers: dict[tuple[str, str, str, str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    # Wikipedia page title → {QID: sources} from the recorded GetWikidataID calls
    titles: dict[str, dict[str, set[str]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(set)))
    sparql_calls: int = 0
    sparql_with_facts: int = 0
    sparql_unparsable: int = 0
    property_labels_from_table: int = 0
    source_records: dict[Path, int] = field(default_factory=lambda: defaultdict(int))  # file read -> records used
    source_formats: dict[Path, str] = field(default_factory=dict)  # file -> format when not humaniq-json
    lead_titles_mapped: int = 0

    def add_label(self, qid: str, label: str, source: str) -> None:
        label = label.strip().strip("'\"").strip()
        if not label or W.QID_RE.fullmatch(label) or len(label) > 200:
            return
        if qid in self.labels:
            if self.labels[qid][0] == label:
                self.labels[qid][1].add(source)
            return  # first seen wins; later conflicting labels are ignored
        self.labels[qid] = (label, {source})

    def add_description(self, qid: str, text: str, source: str) -> None:
        text = text.strip()
        if text and qid not in self.descriptions:
            self.descriptions[qid] = (text, {source})


def _shared_dir(shared: Path | None) -> Path:
    """The folder holding the recorded sources in the data directory's layout: ``shared`` when given (read as it
    is), else the data directory, with the pack's input datasets fetched first when missing
    (:func:`hqa.data.store.require_dataset`)."""
    if shared is None:
        from hqa.data.store import pack_inputs, require_dataset

        for name in pack_inputs():
            shared = require_dataset(name)
    shared = Path(shared)
    if not (shared / "humaniq").is_dir():
        raise DataError(f"recorded data not found: {shared / 'humaniq'} (a folder in the data directory's layout; "
                        "by default `hqa pack build` pulls it: see `hqa data list`)")
    return shared


def iter_recorded_traces(shared: Path) -> Iterator[tuple[str, Trace]]:
    """Every recorded solution process: (source id, parsed trace)."""
    hq = shared / "humaniq"
    for path in sorted((hq / "data").glob("*.json")) + sorted((hq / "data_late_fusion").glob("*.json")):
        if path.name == "merge_few_shot_examples.json":
            continue
        for i, rec in enumerate(read_json(path)):
            if isinstance(rec, dict) and rec.get("One_Shot"):
                yield f"{path.relative_to(shared)}#{i}", parse_trace(rec["One_Shot"], templated=True)
    for path in sorted((hq / "late_fusion").glob("*.json")):
        for i, rec in enumerate(read_json(path)):
            if isinstance(rec, dict) and rec.get("intermediate_logs"):
                yield f"{path.relative_to(shared)}#{i}", parse_trace(rec["intermediate_logs"], question=rec.get("question", "").strip())


def collect(shared: Path | None = None, progress: bool = False) -> PackContents:
    """Read every recorded source and collect facts, labels, descriptions and passages."""
    # rdflib logs a warning for every xsd:dateTime it cannot turn into a Python value (years < 1, e.g. -1400)
    logging.getLogger("rdflib.term").setLevel(logging.ERROR)
    shared = _shared_dir(shared)
    pack = PackContents()
    _collect_traces(pack, shared, progress)
    _collect_squall(pack, shared)
    _label_properties_from_table(pack)
    _collect_compmix_evidence(pack, shared)
    return pack


def _collect_traces(pack: PackContents, shared: Path, progress: bool) -> None:
    """Every step of every recorded solution process, sourced ``<file>#<record>/step<n>:<action>``."""
    from tqdm import tqdm

    traces = list(iter_recorded_traces(shared))
    for source, trace in tqdm(traces, desc="recorded traces", unit="trace", disable=not progress):
        pack.source_records[shared / source.split("#", 1)[0]] += 1
        for n, step in enumerate(trace.steps):
            _collect_step(pack, step, f"{source}/step{n}:{step.action}")


def _collect_step(pack: PackContents, step: Any, src: str) -> None:
    """What one recorded tool call observed: the passages of a search, a label and page titles of
    ``GetWikidataID``, the labels of ``GetLabel``, the facts, qualifiers and labels of ``RunSparql``."""
    if step.action in _SEARCH_ACTIONS:
        for title, text in passages_from_observation(step.observation):
            pack.passages[(title, text)].add(src)
    elif step.action == "GetWikidataID":
        ids = W.QID_RE.findall(step.observation or "")
        inp = step.action_input.strip().strip("[]'\"")
        if len(set(ids)) == 1 and inp and "," not in inp and not W.QID_RE.search(inp):
            pack.add_label(ids[0], inp, src)
        for title, qid in titles_from_observation(step.action_input, step.observation):
            pack.titles[title][qid].add(src)
    elif step.action == "GetLabel":
        ids = W.QID_RE.findall(step.action_input or "")
        names = labels_from_observation(step.observation)
        if ids and len(ids) == len(names):
            for qid, name in zip(ids, names):
                pack.add_label(qid, name, src)
    elif step.action == "RunSparql":
        _collect_sparql(pack, step.action_input, step.observation, src)


def _collect_sparql(pack: PackContents, query: str, observation: str, src: str) -> None:
    """A recorded SPARQL call with result rows: its ground facts, qualifiers and ``?xLabel`` labels (a query that
    does not parse is counted and skipped)."""
    rows = parse_result_rows(observation)
    if not rows:
        return
    pack.sparql_calls += 1
    try:
        facts, labels = facts_from_sparql(query, rows)
    except Exception:  # noqa: BLE001 - recorded queries include invalid SPARQL; skip those
        pack.sparql_unparsable += 1
        return
    quals = qualifiers_from_sparql(query, rows)
    if facts or quals:
        pack.sparql_with_facts += 1
    for s, p, o in facts:  # terms keyed by their N-Triples spelling (stable: facts.jsonl, hashing)
        pack.facts[(s.n3(), p.n3(), o.n3())].add(src)
    for s, pid, o, qid, v in quals:
        pack.qualifiers[(s.n3() if s is not None else "", pid, o.n3(), qid, v.n3())].add(src)
    for qid, label in labels:
        pack.add_label(qid, label, src)


def _collect_squall(pack: PackContents, shared: Path) -> None:
    """The SQUALL few-shots' entity tables (labels, descriptions) and the ``<Qid:label>`` tokens of their
    completions."""
    squall = shared / "humaniq" / "Tools_Data" / "squall_fixed_few_shot.json"
    for rec in read_json(squall):
        pack.source_records[squall] += 1
        src = f"{squall.relative_to(shared)}#{rec.get('id')}"
        for ent in rec.get("Entities") or []:
            if ent.get("ID") and ent.get("Label"):
                pack.add_label(ent["ID"], ent["Label"], src)
                if ent.get("Description"):
                    pack.add_description(ent["ID"], ent["Description"], src)
        for qid, label in _SQUALL_TOKEN.findall(rec.get("Completion") or ""):
            pack.add_label(qid, label.replace("_", " "), src)


def _label_properties_from_table(pack: PackContents) -> None:
    """Properties used by recorded facts but never labelled in a recorded observation get their Wikidata label from
    the property table in hqa/data/wikidata.py (schema vocabulary, not facts), with that table as provenance."""
    used = {p.strip("<>").rsplit("/", 1)[-1] for (_s, p, _o) in pack.facts}
    for prop in W.WELL_KNOWN_PROPERTIES:
        if prop["id"] in used and prop["id"] not in pack.labels:
            pack.add_label(prop["id"], prop["label"], "hqa/data/wikidata.py:WELL_KNOWN_PROPERTIES")
            pack.property_labels_from_table += 1


def _collect_compmix_evidence(pack: PackContents, shared: Path) -> None:
    """CompMix-IR's evidence texts as passages (titled by the entity they were retrieved for), when present."""
    mixed = shared / "compmix" / "subset_kb_wikipedia_mixed_rd.json"
    if mixed.exists():
        for i, rec in enumerate(read_json(mixed)):
            pack.source_records[mixed] += 1
            text = (rec.get("evidence_text") or "").strip()
            if text:
                title = rec.get("retrieved_for_entity", {}).get("label") if isinstance(rec.get("retrieved_for_entity"), dict) else None
                pack.passages[(title or text[:60], text)].add(f"{mixed.relative_to(shared)}#{i}:{rec.get('source', '')}")
