"""Relation linking: a relation phrase from a semi-structured chain → ranked Wikidata property ids.

Three stages, the first that yields candidates wins:

1. **exact** — the normalised phrase equals a property's normalised label or alias: score 1.0; the phrase with a
   leading ``is/was/has/the…`` and a trailing ``of/in/by…`` removed: 0.95.  A literal id (``P36``, ``wdt:P36``)
   links directly.
2. **fuzzy** — rapidfuzz ``WRatio`` between the content words of the phrase and of every label and alias (function
   words such as ``the/of/is`` dropped, so ``the`` never fuzzy-matches ``father``), cut off at 85: score
   ``0.9 · ratio/100``.
3. **embedding** — only with an injected ``similarity(query, texts) -> list[float]`` (the same shape as
   :class:`hqa.retrievers.linking.entities.EntityLinker` takes): cosine between the phrase and ``label: description``,
   kept at ≥ ``min_similarity``: score ``0.8 · cosine``.

No candidate → ``[]`` (the SS-CoT filler then falls back to text).  Properties come from the knowledge pack's
entity records (ids starting with ``P``) via :meth:`RelationLinker.from_linker`; a small table of well-known
Wikidata properties (:data:`WELL_KNOWN_PROPERTIES`, real ids and labels) fills gaps and contributes aliases —
the pack's own label wins where both exist.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

from hqa.data.wikidata import WELL_KNOWN_PROPERTIES  # re-exported
from hqa.retrievers.linking.entities import norm_label

Similarity = Callable[[str, list[str]], list[float]]

_PID_RE = re.compile(r"^\s*(?:wdt:|p:|ps:|pq:)?(P\d+)\s*$", re.I)
_LEAD = re.compile(r"^(?:(?:is|was|are|were|has|have|had|does|did|be|been|the|a|an|its|their)\s+)+")
_TRAIL = re.compile(r"\s+(?:of|in|by|for|at|to|on|from|with|as)$")
STOP_WORDS = {"the", "a", "an", "of", "in", "on", "at", "by", "for", "to", "from", "with", "as", "is", "was", "are", "were",
         "has", "have", "had", "its", "their", "or", "and", "be", "been", "does", "did"}

def _content(text: str) -> str:
    """The normalised phrase without function words (what fuzzy matching compares)."""
    return " ".join(w for w in norm_label(text).split() if w not in STOP_WORDS)


def _keys(text: str) -> list[str]:
    """The normalised phrase and its trimmed variant (auxiliaries/articles in front, a preposition at the end)."""
    key = norm_label(text)
    return list(dict.fromkeys(k for k in (key, _TRAIL.sub("", _LEAD.sub("", key)).strip()) if k))


class RelationLinker:
    """Label/alias index over property records ``{id, label, description, aliases?}``."""

    fuzzy_cutoff = 85.0  # WRatio below this is no match
    min_similarity = 0.55  # embedding stage: cosine below this is no match

    def __init__(self, properties: Iterable[dict], similarity: Similarity | None = None):
        self.properties: dict[str, dict] = {}
        for p in properties:
            pid = str(p.get("id") or "")
            if pid.startswith("P") and pid[1:].isdigit() and (p.get("label") or pid not in self.properties):
                self.properties[pid] = dict(p)
        self.by_key: dict[str, list[str]] = {}
        self.by_content: dict[str, list[str]] = {}
        for pid, p in self.properties.items():
            for name in [p.get("label", "")] + list(p.get("aliases") or []):
                key = norm_label(name)
                if key and pid not in self.by_key.setdefault(key, []):
                    self.by_key[key].append(pid)
                content = _content(name)
                if content and pid not in self.by_content.setdefault(content, []):
                    self.by_content[content].append(pid)
        self._contents = list(self.by_content)
        self.similarity = similarity
        self._ids = list(self.properties)

    @classmethod
    def from_linker(cls, linker, similarity: Similarity | None = None, well_known: bool = True) -> "RelationLinker":
        """From an EntityLinker's records (ids starting with ``P``), topped up with :data:`WELL_KNOWN_PROPERTIES`."""
        pack = [e for pid, e in getattr(linker, "entities", {}).items() if str(pid).startswith("P")]
        return cls(merge_properties(pack, WELL_KNOWN_PROPERTIES if well_known else []), similarity)

    def label(self, pid: str) -> str | None:
        p = self.properties.get(pid)
        return (p.get("label") or None) if p else None

    def _result(self, scored: dict[str, float], k: int) -> list[tuple[str, str, float]]:
        ranked = sorted(scored.items(), key=lambda x: (-x[1], int(x[0][1:])))
        return [(pid, self.properties.get(pid, {}).get("label", pid), round(s, 4)) for pid, s in ranked[:k]]

    def link(self, relation_text: str, k: int = 3) -> list[tuple[str, str, float]]:
        """Ranked ``(property id, label, score)``; ``[]`` when nothing matches."""
        text = str(relation_text or "")
        if m := _PID_RE.match(text):
            pid = m.group(1).upper()
            return [(pid, self.properties.get(pid, {}).get("label", pid), 1.0)]
        keys = _keys(text)
        if not keys or k <= 0:
            return []
        exact: dict[str, float] = {}
        for rank, key in enumerate(keys):  # the phrase as written beats its trimmed variant
            for pid in self.by_key.get(key, []):
                exact.setdefault(pid, 1.0 - 0.05 * rank)
        if exact:
            return self._result(exact, k)
        from rapidfuzz import fuzz, process

        fuzzy: dict[str, float] = {}
        content = _content(text)
        if content:
            for label, score, _ in process.extract(content, self._contents, scorer=fuzz.WRatio,
                                                   limit=max(k * 2, 10), score_cutoff=self.fuzzy_cutoff):
                for pid in self.by_content[label]:
                    fuzzy[pid] = max(fuzzy.get(pid, 0.0), 0.9 * score / 100.0)
        if fuzzy:
            return self._result(fuzzy, k)
        if self.similarity is None or not self._ids:
            return []
        texts = [f"{p.get('label', '')}: {p['description']}" if p.get("description") else str(p.get("label", ""))
                 for p in (self.properties[pid] for pid in self._ids)]
        sims = self.similarity(keys[0], texts)
        emb = {pid: 0.8 * float(s) for pid, s in zip(self._ids, sims) if float(s) >= self.min_similarity}
        return self._result(emb, k)


def merge_properties(primary: Iterable[dict], extra: Iterable[dict]) -> list[dict]:
    """``primary`` records win on label/description; ``extra``'s label (when different) and aliases become
    aliases; ``extra`` ids missing from ``primary`` fill gaps."""
    def record(p: dict) -> dict:
        return {"id": p["id"], "label": p.get("label", ""), "description": p.get("description", ""),
                "aliases": list(p.get("aliases") or [])}

    out = {p["id"]: record(p) for p in primary if p.get("id")}
    for p in extra:
        if not p.get("id"):
            continue
        if p["id"] not in out:
            out[p["id"]] = record(p)
            continue
        rec, names = out[p["id"]], [p.get("label", "")] + list(p.get("aliases") or [])
        rec["label"] = rec["label"] or names[0]
        rec["aliases"] += [a for a in names if a and a != rec["label"] and a not in rec["aliases"]]
    return list(out.values())


__all__ = ["RelationLinker", "WELL_KNOWN_PROPERTIES", "merge_properties"]
