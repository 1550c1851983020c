"""``hqa batch``: answer a file of questions (no gold needed) into a resumable JSONL of answers and traces.

Input is JSONL or CSV with a ``question`` and optionally an ``id``; a question without an id gets ``row-N`` (its
1-based row number), so a rerun over the same file resumes where the last one stopped (:func:`hqa.jobs.evaluate.evaluate`).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from hqa.errors import MAX_QUESTION_CHARS, DataError, question_too_long  # the cap ask and serve apply too


def _record(raw: Any, where: str, n: int) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise DataError(f"{where}: expected an object with a 'question' field, got {type(raw).__name__}")
    question = raw.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{where}: 'question' is missing or empty")
    too_long = question_too_long(question, MAX_QUESTION_CHARS)
    if too_long:
        raise DataError(f"{where}: {too_long}")
    qid = raw.get("id")
    qid = f"row-{n}" if qid is None or str(qid).strip() == "" else str(qid)
    return {"id": qid, "question": question.strip()}


def read_questions(path: Path) -> list[dict[str, Any]]:
    """The questions of a ``.jsonl`` or ``.csv`` file, validated; DataError (one line) on anything malformed."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".csv"):
        raise DataError(f"{path}: batch input must be .jsonl or .csv")
    if not path.is_file():
        raise DataError(f"{path} does not exist")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 (byte {exc.start})") from None
    out: list[dict[str, Any]] = []
    if suffix == ".jsonl":
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
            out.append(_record(raw, f"{path}:{lineno}", len(out) + 1))
    else:
        reader = csv.DictReader(text.splitlines())
        if not reader.fieldnames or "question" not in reader.fieldnames:
            raise DataError(f"{path}: the CSV header needs a 'question' column")
        for row in reader:
            out.append(_record(row, f"{path}:{reader.line_num}", len(out) + 1))
    ids = [r["id"] for r in out]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise DataError(f"{path}: duplicate id {dup!r} (rows of the output are keyed by id)")
    if not out:
        raise DataError(f"{path} has no questions")
    return out


def run_batch(program, questions: list[dict[str, Any]], out: Path, *, threads: int = 1, resume: bool = True,
              progress: bool = False, engine=None, spec=None):
    """Answer ``questions`` with ``program`` into ``out`` (JSONL, appended per question, resumable), on ``engine``
    (:mod:`hqa.jobs.engine`; default threads; Ray opens the program from ``spec``)."""
    import dspy

    from hqa.jobs.evaluate import evaluate

    out = Path(out)
    if out.suffix.lower() != ".jsonl":
        raise DataError(f"--out {out} must be a .jsonl file")
    examples = [dspy.Example(id=q["id"], question=q["question"], answers=[], answer_ids=[]).with_inputs("question")
                for q in questions]
    return evaluate(program, examples, threads=threads, out=out, resume=resume, progress=progress, engine=engine,
                    spec=spec)


__all__ = ["read_questions", "run_batch"]
