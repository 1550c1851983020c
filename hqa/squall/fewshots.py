"""HumanIQ's SQUALL few-shots and their nearest-question selection (HumanIQ §3, generateQuery).

The 459 few-shots (``hqa/data/humaniq/squall_fixed_few_shot.json``, from NIMI-research/Hybrid-QA; see
``ATTRIBUTION.md`` there) are ``{id, Question, Entities: [{ID, Label, Description}], Completion}``.  As HumanIQ's
generateQuery, :meth:`FewShotIndex.nearest` takes the ``k = 2`` questions with the highest dot product of their
all-MiniLM-L6-v2 embeddings, least similar first; docs/squall.md ("The tool") has the rest.  The index is a
process-wide cache (:func:`squall_fewshots`), never state of a DSPy module: optimizers deep-copy programs.
"""

from __future__ import annotations

import functools
import json
import threading
from dataclasses import dataclass
from importlib import resources

import numpy as np

FEWSHOT_FILE = "squall_fixed_few_shot.json"
DEFAULT_K = 2  # HumanIQ's generateQuery: the two most similar few-shot questions

#: completions HumanIQ's code replaces when it loads the file (NIMI-research/Hybrid-QA @ 884efd8,
#: app/Tools/Tool.py, Squall.load_dataset): question → the completion used instead of the file's
CORRECTED = {
    "What is the name of the sixth movie in the Harry Potter franchise?":
        "Which <Q11424:film> is-<P179:part_of_the_series> <Q216930:Harry_Potter_film_series> at "
        "<P1545:series_ordinal> 6?",
    "What was the name of the last Harry Potter movie?":
        "Which <Q11424:film> is-<P179:part_of_the_series> <Q216930:Harry_Potter_film_series> has the latest "
        "<P577:publication_date>?",
}


@dataclass(frozen=True)
class FewShot:
    id: int
    question: str
    entities: tuple[str, ...]  # "Qid: label (description)"
    squall: str


def entity_line(qid: str, label: str | None, description: str | None) -> str:
    """An entity as GenerateSparql shows it: ``Q42: Douglas Adams (English author and humourist)``."""
    line = f"{qid}: {label or ''}".rstrip()
    return f"{line} ({description})" if description else line


def load_fewshots() -> list[FewShot]:
    """The packaged few-shots with a Completion, in file order, with HumanIQ's two corrections applied."""
    text = resources.files("hqa.data").joinpath("humaniq", FEWSHOT_FILE).read_text(encoding="utf-8")
    out = []
    for rec in json.loads(text):
        question, squall = rec.get("Question"), rec.get("Completion")
        if question is None or squall is None:
            continue
        question = question.strip()
        squall = CORRECTED.get(question, squall).strip()
        ents = tuple(entity_line(e.get("ID", ""), e.get("Label"), e.get("Description"))
                     for e in rec.get("Entities") or [])
        out.append(FewShot(int(rec.get("id", 0)), question, ents, squall))
    return out


class FewShotIndex:
    """Few-shot questions embedded once; :meth:`nearest` gives the ``k`` most similar to a question."""

    def __init__(self, shots: list[FewShot], embedder: str | None = None):
        from hqa.retrievers.embedding.encoders import embed

        self.shots = shots
        self.embedder = embedder
        self.vectors = embed([s.question for s in shots], embedder) if shots else np.zeros((0, 1), np.float32)

    def nearest(self, question: str, k: int = DEFAULT_K) -> list[FewShot]:
        """The ``k`` few-shots whose questions are closest to ``question``, least similar first (HumanIQ's
        order: the most similar example sits right before the question)."""
        if k <= 0 or not self.shots:
            return []
        from hqa.retrievers.embedding.memo import query_vector

        scores = self.vectors @ query_vector(question, self.embedder)
        k = min(k, len(self.shots))
        top = np.argpartition(-scores, k - 1)[:k]
        top = sorted(top, key=lambda i: (scores[i], -i))
        return [self.shots[i] for i in top]


_LOCK = threading.Lock()


@functools.lru_cache(maxsize=4)
def _index(embedder: str | None) -> FewShotIndex:
    return FewShotIndex(load_fewshots(), embedder)


def squall_fewshots(embedder: str | None = None) -> FewShotIndex:
    """The shared index over the packaged few-shots (built on first use, ~1 s with the packaged MiniLM)."""
    with _LOCK:
        return _index(embedder)
