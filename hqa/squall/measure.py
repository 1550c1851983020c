"""Measure the translator against HumanIQ's recorded GenerateSparql observations (docs/squall.md, "Coverage").

``python -m hqa.squall.measure [HUMANIQ_DATA_DIR]`` reads the human solution processes (``data/*.json``,
``data_late_fusion/*.json``) and HumanIQ's Wikidata-only GPT-4 logs (``late_fusion/*.json``) of the HumanIQ data
folder (default ``<data dir>/humaniq``, pulled on first use: ``hqa data list``) and prints: how many few-shot completions translate; the recorded pairs
(calls whose question is a few-shot's, so the completion is the SQUALL) reproduced modulo whitespace and variable
names; and how many distinct recorded queries share, ids and numbers abstracted, the shape of some translation.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from pathlib import Path

from hqa.squall.fewshots import load_fewshots
from hqa.squall.lexer import SquallSyntaxError
from hqa.squall.translate import canonical, translate

_CALL_RE = re.compile(r"Action: ?GenerateSparql\s*\n+\s*Action Input:(.*?)\n+\s*Observation:(.*?)\n\s*\n?\s*Thought",
                      re.S)


def recorded_calls(root: str) -> list[tuple[str, str]]:
    """``(question, observation)`` of every recorded GenerateSparql call under ``root``."""
    out = []
    for path in sorted(glob.glob(os.path.join(root, "late_fusion", "*.json"))):
        for rec in json.loads(Path(path).read_text(encoding="utf-8")):
            for m in _CALL_RE.finditer(rec.get("intermediate_logs") or ""):
                out.append((rec["question"].strip(), m.group(2).strip()))
    for path in sorted(glob.glob(os.path.join(root, "data", "*.json")) +
                       glob.glob(os.path.join(root, "data_late_fusion", "*.json"))):
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        for rec in data if isinstance(data, list) else []:
            for m in _CALL_RE.finditer(rec.get("One_Shot") or ""):
                out.append((rec["Question"].strip(), m.group(2).strip()))
    return out


def _shape(sparql: str) -> str:
    return re.sub(r"\b[QP]\d+\b", "ID", re.sub(r"(?<![?\w])-?\d+\b", "N", canonical(sparql)))


def main(root: str) -> dict:
    norm = lambda s: " ".join(s.lower().split()).rstrip("?").strip()  # noqa: E731
    shots = load_fewshots()
    translations: dict[str, str] = {}
    translated = 0
    for s in shots:
        try:
            translations[s.squall] = translate(s.squall)
            translated += 1
        except SquallSyntaxError:
            pass
    by_question = {norm(s.question): s.squall for s in reversed(shots)}
    calls = recorded_calls(root)
    queries = [(q, obs) for q, obs in calls if obs.startswith(("SELECT", "ASK"))]
    pairs = [(q, obs) for q, obs in queries if norm(q) in by_question]
    same = sum(canonical(translations.get(by_question[norm(q)], "")) == canonical(obs) for q, obs in pairs)
    shapes = {_shape(t) for t in translations.values()}
    distinct = {canonical(obs) for _q, obs in queries}
    covered = sum(_shape(r) in shapes for r in distinct)
    result = {"fewshots": len(shots), "translated": translated, "calls": len(calls),
              "query_observations": len(queries), "pairs": len(pairs), "pairs_reproduced": same,
              "distinct_queries": len(distinct), "shape_covered": covered}
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        from hqa.data.store import require_dataset

        require_dataset("humaniq-traces")
        main(str(require_dataset("humaniq-late-fusion") / "humaniq"))
