"""Labels of Wikidata ids through any SPARQL backend: one query per 50 ids (:data:`~hqa.retrievers.sparql.guard.LABELS`),
English labels.  The backend remembers them (:meth:`hqa.retrievers.sparql.backends.SparqlStore.labels`)."""

from __future__ import annotations

import re
from typing import Callable

from hqa.data import wikidata as W
from hqa.retrievers.base import SparqlResult
from hqa.retrievers.sparql.guard import LABELS

_ID = re.compile(r"[QP]\d+")


def label_ids(ids: list[str]) -> list[str]:
    """The Q/P ids among ``ids``, stripped (anything else has no label to ask for)."""
    return [x for x in (x.strip() for x in ids) if _ID.fullmatch(x)]


def query_labels(run: Callable[[str], SparqlResult], ids: list[str]) -> dict[str, str]:
    """English labels of the Q/P ``ids`` through ``run`` (a backend's guarded query), 50 ids per query."""
    out: dict[str, str] = {}
    for chunk in range(0, len(ids), 50):
        part = ids[chunk: chunk + 50]
        values = " ".join(f"wd:{x}" if x.startswith("Q") else f"wdt:{x} wd:{x}" for x in part)
        res = run(LABELS.format(values=values))
        for row in res.rows:
            lid = W.local_id(row.get("e", ""))
            if lid and lid not in out:
                out[lid] = row.get("l", "")
    return out


__all__ = ["label_ids", "query_labels"]
