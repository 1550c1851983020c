"""Reading JSON-lines files with errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Iterator

from hqa.errors import DataError


def json_objects(lines: Iterable[tuple[int, str]], where: object,
                 expected: str = "a JSON object") -> Iterator[tuple[int, dict]]:
    """``(line number, record)`` for every non-blank ``(line number, text)``; invalid JSON or a line that is not an
    object raises :class:`DataError` with ``<where>:<line>``."""
    for lineno, line in lines:
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise DataError(f"{where}:{lineno}: not valid JSON ({getattr(e, 'msg', e)})") from None
        if not isinstance(rec, dict):
            raise DataError(f"{where}:{lineno}: expected {expected}")
        yield lineno, rec


def iter_jsonl(path: Path | str, expected: str = "a JSON object") -> Iterator[tuple[int, dict]]:
    """``(line number, record)`` for every non-blank line (a leading byte-order mark is skipped); a missing/unreadable
    file, non-UTF-8 bytes, invalid JSON or a line that is not an object raises :class:`DataError` with
    ``<file>:<line>``."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8-sig") as fh:
            yield from json_objects(enumerate(fh, 1), path, expected)
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason})") from None
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror or e}") from None


def read_jsonl(path: Path | str, expected: str = "a JSON object") -> list[dict]:
    """Every record of a JSON-lines file, in order (:func:`iter_jsonl`'s checks and errors)."""
    return [rec for _, rec in iter_jsonl(path, expected)]
