"""Entity linking: mention → ranked Wikidata ids, labels for ids, and mention spotting in a question.

Candidates come from label lookup (exact match of the normalised label, then fuzzy match with rapidfuzz).  When
several candidates remain they are disambiguated as in DIVKNOWQA: by the similarity between the question and each
candidate's ``label: description`` text (sentence embeddings), added to the string-match score.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Callable

from hqa.data import wikidata as W

_WS = re.compile(r"\s+")
_PUNCT = re.compile(r"[^\w\s]")
_STOP = {
    "the", "a", "an", "of", "in", "on", "is", "was", "who", "what", "which", "when", "where", "how", "did", "does",
    "do", "to", "and", "for", "by", "with", "from", "at", "as", "be", "are", "were", "that", "this", "it", "its",
    "many", "much", "first", "name", "has", "have", "had",
}


def norm_label(text: str) -> str:
    text = unicodedata.normalize("NFKC", text or "").lower()
    return _WS.sub(" ", _PUNCT.sub(" ", text)).strip()


@dataclass
class Candidate:
    id: str
    label: str
    description: str = ""
    score: float = 0.0
    mention: str = ""

    def to_dict(self) -> dict:
        return {"id": self.id, "label": self.label, "description": self.description, "score": round(self.score, 4),
                "mention": self.mention}


class EntityLinker:
    """Label index over ``(id, label, description)`` records.

    ``similarity(question, texts) -> list[float]`` is the disambiguation function (cosine of sentence embeddings by
    default, injected so tests can pass a deterministic one).
    """

    def __init__(self, entities: list[dict], similarity: Callable[[str, list[str]], list[float]] | None = None):
        self.entities = {e["id"]: e for e in entities if e.get("id")}
        self.by_label: dict[str, list[str]] = {}
        for e in self.entities.values():
            key = norm_label(e.get("label", ""))
            if key and e["id"].startswith("Q"):
                self.by_label.setdefault(key, []).append(e["id"])
        self._labels = list(self.by_label)
        self._max_words = max((len(k.split()) for k in self._labels), default=1)
        self.similarity = similarity

    # -- lookups ---------------------------------------------------------------------------------------------
    def label(self, qid: str) -> str | None:
        e = self.entities.get(qid)
        return e.get("label") or None if e else None

    def labels(self, ids: list[str]) -> dict[str, str]:
        return {i: self.entities[i]["label"] for i in ids if i in self.entities and self.entities[i].get("label")}

    def _candidates(self, mention: str, limit: int) -> list[tuple[str, float]]:
        key = norm_label(mention)
        if not key:
            return []
        if key in self.by_label:
            return [(qid, 1.0) for qid in self.by_label[key]]
        from rapidfuzz import fuzz, process

        out: list[tuple[str, float]] = []
        for label, score, _ in process.extract(key, self._labels, scorer=fuzz.WRatio, limit=limit, score_cutoff=86):
            out.extend((qid, score / 100.0 * 0.9) for qid in self.by_label[label])
        return out

    def link(self, mention: str, question: str | None = None, k: int = 5) -> list[Candidate]:
        """Ranked candidates for a mention; ``question`` enables description-based disambiguation."""
        if re.fullmatch(r"\s*\[?'?(Q\d+)'?\]?\s*", mention or ""):
            qid = re.search(r"Q\d+", mention).group(0)
            e = self.entities.get(qid, {})
            return [Candidate(qid, e.get("label", ""), e.get("description", ""), 1.0, mention)]
        scored = self._candidates(mention, limit=max(k * 2, 10))
        cands = [
            Candidate(qid, self.entities[qid].get("label", ""), self.entities[qid].get("description", ""), s, mention)
            for qid, s in scored
        ]
        if question and len(cands) > 1 and self.similarity is not None:
            sims = self.similarity(question, [f"{c.label}: {c.description}" for c in cands])
            for c, sim in zip(cands, sims):
                c.score += 0.5 * float(sim)
        cands.sort(key=lambda c: (-c.score, int(c.id[1:])))
        return cands[:k]

    def title_to_qid(self, title: str) -> str | None:
        """A Wikipedia page title → its QID: exact label match, then the title without a trailing
        disambiguation in parentheses ("Animal Farm (film)" → "Animal Farm"); None when unknown or ambiguous."""
        for key in (norm_label(title), norm_label(re.sub(r"\s*\([^)]*\)\s*$", "", title or ""))):
            ids = self.by_label.get(key, []) if key else []
            if len(ids) == 1:
                return ids[0]
        return None

    def spot(self, question: str, k: int = 5) -> list[Candidate]:
        """Entities whose label occurs in the question (longest non-overlapping n-grams first)."""
        words = norm_label(question).split()
        taken = [False] * len(words)
        found: list[Candidate] = []
        for n in range(min(self._max_words, len(words)), 0, -1):
            for i in range(0, len(words) - n + 1):
                if any(taken[i: i + n]):
                    continue
                gram = " ".join(words[i: i + n])
                if n == 1 and (gram in _STOP or len(gram) < 3):
                    continue
                if gram in self.by_label:
                    for j in range(i, i + n):
                        taken[j] = True
                    best = self.link(gram, question, k=1)
                    if best:
                        best[0].mention = gram
                        best[0].score = float(n)  # longer mentions first
                        found.append(best[0])
        found.sort(key=lambda c: -c.score)
        return found[:k]


def embedding_similarity(embedder: str | None = None) -> Callable[[str, list[str]], list[float]]:
    def sim(question: str, texts: list[str]) -> list[float]:
        from hqa.retrievers.embed import embed

        vecs = embed([question] + texts, embedder)
        return [float(v) for v in vecs[1:] @ vecs[0]]

    return sim


def load_pack_entities(pack_dir) -> list[dict]:
    from pathlib import Path

    from hqa.data.pack import read_jsonl

    return read_jsonl(Path(pack_dir) / "entities.jsonl")


def qid_of(text: str) -> str | None:
    m = W.QID_RE.search(text or "")
    return m.group(1) if m else None
