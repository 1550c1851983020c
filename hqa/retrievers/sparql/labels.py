"""Labels of Wikidata ids through any SPARQL backend: one query per 50 ids (:data:`~hqa.retrievers.sparql.guard.LABELS`),
English labels, remembered on the backend."""

from __future__ import annotations

import re
from typing import Any

from hqa.data import wikidata as W
from hqa.retrievers.sparql.guard import LABELS


def labels_via(backend: Any, ids: list[str]) -> dict[str, str]:
    """English labels for Q/P ids, cached on the backend."""
    out: dict[str, str] = {}
    wanted = []
    for x in ids:
        x = x.strip()
        if not re.fullmatch(r"[QP]\d+", x):
            continue
        if x in backend._label_cache:
            out[x] = backend._label_cache[x]
        else:
            wanted.append(x)
    for chunk in range(0, len(wanted), 50):
        part = wanted[chunk: chunk + 50]
        values = " ".join(f"wd:{x}" if x.startswith("Q") else f"wdt:{x} wd:{x}" for x in part)
        res = backend.run(LABELS.format(values=values))
        for row in res.rows:
            lid = W.local_id(row.get("e", ""))
            if lid and lid not in out:
                out[lid] = row.get("l", "")
                backend._label_cache[lid] = out[lid]
    return out


__all__ = ["labels_via"]
