"""Files of a run shared by the run-folder and artifact tests: valid prediction rows as evaluate writes them, and an
artifact's manifest edited in place."""

from __future__ import annotations

import json
from pathlib import Path

ROW = {"id": "q1", "question": "Q?", "answer": "A", "gold": ["A"], "gold_ids": [], "dataset": "mintaka",
       "trace": {}, "error": None, "prompt_tokens": 0, "completion_tokens": 0, "tool_calls": 0, "lm_calls": 0,
       "seconds": 0.1, "scores": {"em": 1.0, "f1": 1.0, "recall": 1.0, "hits1": 0.0}}
CLOSEDBOOK_ROW = {"id": "q1", "question": "Q?", "answer": "A", "gold": ["A"], "gold_ids": [], "dataset": "mintaka",
                  "trace": {"program": "closedbook"}, "error": None, "prompt_tokens": 1, "completion_tokens": 1,
                  "tool_calls": 0, "lm_calls": 1, "seconds": 0.1,
                  "scores": {"em": 1.0, "f1": 1.0, "recall": 1.0, "hits1": 0.0}}


def edit_manifest(art: Path, **changes) -> None:
    m = json.loads((art / "manifest.json").read_text())
    m.update(changes)
    (art / "manifest.json").write_text(json.dumps(m))
