"""Answerable subsets: the benchmark questions whose gold answer is reachable in the offline world of a pack.

The definition (a gold answer one KG step or one passage from an anchor entity of the question, or on the page of
its gold entity) is docs/evaluation.md, "Answerable sets"; :meth:`AnswerableIndex.reason` implements it.  The subset
is computed from the pack files alone and cached in ``<pack>/answerable.json`` keyed by pack version, definition
version and a fingerprint of the dataset's ids.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hqa.data import wikidata as W
from hqa.data.wikidata import norm_label

DEFINITION_VERSION = 2  # 2: the page route (4.)
CACHE_FILE = "answerable.json"

_DATE = re.compile(r"^(-?\d{1,4})-(\d{2})-(\d{2})T")
_NUMBER = re.compile(r"^[+-]?\d+(?:\.\d+)?$")
_MONTHS = {m: i for i, m in enumerate(("january", "february", "march", "april", "may", "june", "july", "august",
                                         "september", "october", "november", "december"), start=1)}
_DMY = re.compile(r"^(\d{1,2}) ([a-z]+) (\d{3,4})$")
_MDY = re.compile(r"^([a-z]+) (\d{1,2}) (\d{3,4})$")
_LITERAL = re.compile(r'^"(.*)"(?:@[\w-]+|\^\^<[^>]+>)?$', re.S)

__all__ = ["AnswerableIndex", "answer_keys", "answerable_ids", "filter_answerable", "value_key"]


def value_key(value: str) -> str:
    """Comparable form of a KG value or gold answer: dates (ISO, "5 March 2020", "May 21 1994") → ``YYYY-MM-DD``, numbers → canonical decimal,
    anything else → :func:`norm_label`."""
    value = (value or "").strip()
    m = _DATE.match(value)
    if m:
        year = m.group(1)
        sign = "-" if year.startswith("-") else ""
        return f"{sign}{int(year.lstrip('-')):04d}-{m.group(2)}-{m.group(3)}"
    if _NUMBER.match(value):
        text = value.lstrip("+")
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        return text or "0"
    text = norm_label(value)
    for pattern, day, month in ((_DMY, 1, 2), (_MDY, 2, 1)):  # "5 March 2020", "May 21 1994" → ISO date
        m = pattern.match(text)
        if m and m.group(month) in _MONTHS and 1 <= int(m.group(day)) <= 31:
            return f"{int(m.group(3)):04d}-{_MONTHS[m.group(month)]:02d}-{int(m.group(day)):02d}"
    return text


def answer_keys(record) -> set[str]:
    """Comparable keys of a record's gold answers: every label and every id (QIDs stay QIDs; CompMix dates carry
    their ISO timestamp as id, so "5 March 2020" also matches the KG literal 2020-03-05)."""
    keys = {value_key(a) for a in [*record.answers, *(record.meta.get("raw_answer_ids") or [])] if a}
    return (keys | set(record.answer_ids)) - {""}


def _contains(haystack_words: str, needle: str) -> bool:
    """Whole-word containment of normalised texts (both already passed through :func:`norm_label`)."""
    return bool(needle) and f" {needle} " in f" {haystack_words} "


@dataclass
class AnswerableIndex:
    """The parts of a pack the definition needs: labels, one-step neighbours per entity, normalised passages."""

    labels: dict[str, str]
    neighbours: dict[str, set[str]] = field(default_factory=dict)
    passages: list[str] = field(default_factory=list)
    version: str = ""
    pages: dict[str, list[int]] = field(default_factory=dict)  # normalised page title -> passage indices

    @classmethod
    def from_pack(cls, pack_dir: Path) -> "AnswerableIndex":
        from hqa.data.jsonl import read_jsonl
        from hqa.data.pack_manifest import read_manifest
        from hqa.data.wikidata import strip_disambiguation

        pack_dir = Path(pack_dir)
        manifest = read_manifest(pack_dir)
        labels = {e["id"]: e["label"] for e in read_jsonl(pack_dir / "entities.jsonl") if e.get("label")}
        neighbours: dict[str, set[str]] = defaultdict(set)
        for fact in read_jsonl(pack_dir / "facts.jsonl"):
            s = W.local_id(fact["s"].strip("<>"))
            o_term = fact["o"]
            if o_term.startswith("<"):
                o = W.local_id(o_term.strip("<>"))
                if s and o:
                    neighbours[s].add(o)
                    neighbours[o].add(s)
            elif s:
                m = _LITERAL.match(o_term)
                if m:
                    neighbours[s].add("lit:" + value_key(m.group(1)))
        rows = read_jsonl(pack_dir / "passages.jsonl")
        passages = [norm_label(f"{p.get('title', '')} {p.get('text', '')}") for p in rows]
        pages: dict[str, list[int]] = defaultdict(list)
        for i, p in enumerate(rows):
            pages[norm_label(strip_disambiguation(str(p.get("title") or "")))].append(i)
        pages.pop("", None)
        return cls(labels, dict(neighbours), passages, str(manifest.get("version", "")), dict(pages))

    # -- the definition ----------------------------------------------------------------------------------------
    def anchors(self, record) -> list[str]:
        """Gold question entities with a pack label; for datasets without gold entities, pack entities whose label
        is a word n-gram of the question."""
        gold = record.question_entities()
        if gold:
            return [q for q in gold if q in self.labels]
        words = f" {norm_label(record.question)} "
        return sorted(q for q, label in self.labels.items()
                      if q.startswith("Q") and len(norm_label(label)) >= 3 and f" {norm_label(label)} " in words)

    def reason(self, record, named: bool = False) -> dict | None:
        """Why ``record`` is answerable (``{"anchor", "via", "answer"}``) or None when it is not.

        ``named=True`` keeps only the routes whose answer the pack can say: a KG neighbour that is a literal or has a
        label, or a passage.  A gold answer QID without a pack label is reachable, but no program answers it by name
        from the pack unless the question names it."""
        if not record.answers or set(record.answers) <= {"yes", "no"}:
            return None
        keys = answer_keys(record)
        for anchor in self.anchors(record):
            for x in sorted(self.neighbours.get(anchor, ())):
                if x.startswith("lit:"):
                    if x[4:] in keys:
                        return {"anchor": anchor, "via": "kg", "answer": x[4:]}
                elif named and x not in self.labels:
                    continue
                elif x in keys or value_key(self.labels.get(x, "")) in keys - {""}:
                    return {"anchor": anchor, "via": "kg", "answer": x}
        texts = {norm_label(a) for a in record.answers if not W.QID_RE.fullmatch(a)}
        texts |= {norm_label(self.labels[q]) for q in record.answer_ids if q in self.labels}
        texts = {t for t in texts if len(t) >= 2}
        for anchor in self.anchors(record):
            name = norm_label(self.labels.get(anchor, ""))
            if len(name) < 2:
                continue
            for i, passage in enumerate(self.passages):
                if _contains(passage, name):
                    hit = next((t for t in sorted(texts) if t != name and _contains(passage, t)), None)
                    if hit:
                        return {"anchor": anchor, "via": "text", "answer": hit, "passage": i}
        for name, i in self._pages(record):
            hit = next((t for t in sorted(texts) if t != name and _contains(self.passages[i], t)), None)
            if hit:
                return {"anchor": name, "via": "page", "answer": hit, "passage": i}
        return None

    def _pages(self, record) -> list[tuple[str, int]]:
        """``(normalised entity name, passage index)`` of the pages about the question's gold entities: titled with
        a gold entity's dataset label or pack label."""
        meta = record.meta or {}
        names = [e.get("label") for key in ("entities", "questionEntity") for e in meta.get(key) or []
                 if isinstance(e, dict)]
        names += [self.labels.get(q) for q in record.question_entities()]
        return [(name, i) for name in dict.fromkeys(norm_label(n) for n in names if n) if len(name) >= 2
                for i in self.pages.get(name, ())]


def _fingerprint(records: Sequence) -> str:
    digest = hashlib.sha256()
    for r in records:
        digest.update(f"{r.id}\t{r.question}\t{'|'.join(r.answers)}\n".encode())
    return digest.hexdigest()[:16]


def answerable_ids(records: Sequence, pack_dir: Path, spec: str = "") -> list[str]:
    """Ids of the answerable records (in input order), cached in ``<pack>/answerable.json``."""
    from hqa.data.pack_manifest import read_manifest

    pack_dir = Path(pack_dir)
    version = str(read_manifest(pack_dir).get("version", ""))
    key = f"{spec}#{_fingerprint(records)}"
    cache_path = pack_dir / CACHE_FILE
    try:
        cache = json.loads(cache_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cache = {}
    if cache.get("pack_version") != version or cache.get("definition") != DEFINITION_VERSION:
        cache = {"pack_version": version, "definition": DEFINITION_VERSION, "sets": {}}
    entry = cache.get("sets", {}).get(key)
    if isinstance(entry, dict) and isinstance(entry.get("ids"), list):
        return list(entry["ids"])
    index = AnswerableIndex.from_pack(pack_dir)
    reasons = {r.id: index.reason(r) for r in records}
    ids = [r.id for r in records if reasons[r.id] is not None]
    cache["sets"][key] = {"spec": spec, "questions": len(records), "answerable": len(ids), "ids": ids,
                          "via": {i: reasons[i]["via"] for i in ids}}
    from hqa.io.files import write_atomic

    try:
        write_atomic(cache_path, json.dumps(cache))
    except OSError:  # best effort: a read-only pack folder just means the subset is recomputed next time
        pass
    return ids


def filter_answerable(records: Sequence, pack_dir: Path, spec: str = "") -> list:
    """The answerable records of ``records`` (order kept)."""
    keep = set(answerable_ids(records, pack_dir, spec))
    return [r for r in records if r.id in keep]
