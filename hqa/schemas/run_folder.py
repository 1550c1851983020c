"""A run folder: the one owner of the files ``hqa evaluate``, ``compile``, ``compare`` and ``report`` write and read
back — the rows (``predictions.jsonl``, one JSON row per question, appended as each finishes), their tag (what wrote
them; a resume by anything else is refused), the lock (one writer at a time) and what a report writes.

These names are the on-disk format: run folders written by earlier versions load unchanged.  No other module spells
them; it asks a :class:`RunFolder` (or :class:`CompareFolder`) for the path.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hqa.errors import DataError, HQAError
from hqa.io.files import write_atomic
from hqa.schemas.records import check_row
from hqa.schemas.trace import trace_of

log = logging.getLogger(__name__)

ROWS = "predictions.jsonl"
TAG_SUFFIX = ".run.json"  # the tag's name is the rows file's name plus this
LOCK = ".hqa-lock"
SUMMARY_JSON, SUMMARY_MD = "summary.json", "summary.md"
PLOTS = ("metrics.png", "agreement.png")
RISK_COVERAGE = "risk_coverage.png"  # a selective run's risk-coverage curve (written only for one)
IMPORT = "import.json"
POOLED = "pooled.json"
RUN_INFO = "run-info.json"  # what ran (LM, price, world, commit, command, MLflow run): hqa study cells, hqa evaluate
PROGRAM = "program"  # a compiled program the run's workers load (a study's compile arm on Ray: hqa.jobs.study)


def _file(name: str) -> property:
    """The folder's file ``name``, as a property."""

    def path(self) -> Path:
        return self.path / name

    return property(path)


@dataclass(frozen=True)
class _Folder:
    path: Path

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))


@dataclass(frozen=True)
class RunFolder(_Folder):
    """The files of one run folder (``path``); nothing is created until written."""

    rows_path = _file(ROWS)
    summary_json = _file(SUMMARY_JSON)
    summary_md = _file(SUMMARY_MD)
    import_info = _file(IMPORT)
    pooled = _file(POOLED)
    run_info = _file(RUN_INFO)
    risk_coverage = _file(RISK_COVERAGE)
    program_dir = _file(PROGRAM)

    @classmethod
    def of(cls, target: str | Path) -> tuple["RunFolder", Path]:
        """The folder and rows file ``target`` names: a folder (its ``predictions.jsonl``) or a rows file itself
        (any name: ``hqa report`` also reads a ``.jsonl`` given directly)."""
        target = Path(target)
        if target.suffix == ".jsonl" and not target.is_dir():
            return cls(target.parent), target
        return cls(target), target / ROWS

    @property
    def tag_path(self) -> Path:
        return tag_path_of(self.rows_path)

    @property
    def plots(self) -> list[Path]:
        return [self.path / name for name in PLOTS]

    def report_files(self) -> list[Path]:
        """What a report leaves in the folder, with the rows (the files a tracked run logs as artifacts); the
        risk-coverage plot when the run answered selectively."""
        curve = [self.risk_coverage] if self.risk_coverage.exists() else []
        return [self.summary_md, self.summary_json, *self.plots, *curve, self.rows_path]

    def rows(self) -> list[dict]:
        """:func:`read_rows` of the folder's rows file."""
        return read_rows(self.rows_path)

    def required_rows(self) -> list[dict]:
        """:meth:`rows`, refusing a folder that has none (a report over a run that was never evaluated)."""
        rows = self.rows()
        if not rows:
            raise DataError(f"{self.path}: no {ROWS} rows (run hqa evaluate --out {self.path} first)")
        return rows

    def read_run(self) -> "Run":
        """The folder's rows (:meth:`required_rows`) with what wrote them: the tag's program (else the first row's
        trace's, else ``"?"``), its ``program_kwargs`` and its dataset (else the first row's)."""
        rows = self.required_rows()
        tag = self.tag() or {}
        program = str(tag.get("program") or trace_of(rows[0]).program or "?")
        kwargs = tag.get("program_kwargs") if isinstance(tag.get("program_kwargs"), dict) else {}
        return Run(rows, tag, program, kwargs, tag.get("dataset") or rows[0].get("dataset"))

    def info(self) -> dict:
        """The folder's ``run-info.json`` ({} when there is none or it cannot be read)."""
        try:
            info = json.loads(self.run_info.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return info if isinstance(info, dict) else {}

    def tag(self) -> dict | None:
        """The tag the rows were written under (None when there is none or it cannot be read)."""
        try:
            tag = json.loads(self.tag_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return tag if isinstance(tag, dict) else None


@dataclass(frozen=True)
class Run:
    """A run folder as the reports read it (:meth:`RunFolder.read_run`)."""

    rows: list[dict]
    tag: dict
    program: str
    program_kwargs: dict
    dataset: Any


@dataclass(frozen=True)
class CompareFolder(_Folder):
    """The files ``hqa compare`` writes: the table, its plot, its rows, and the finished arms it resumes from."""

    table_md = _file("table.md")
    table_csv = _file("table.csv")
    plot = _file("plot.png")
    rows_json = _file("rows.json")
    arms = _file("arms.json")
    summary_md = _file(SUMMARY_MD)
    summary_csv = _file("summary.csv")

    def arm_rows(self, arm: str) -> Path:
        """The rows file of one arm: ``<arm>.jsonl``, the arm's name with every character outside
        ``A-Za-z0-9_.+=-`` made ``_``."""
        return self.path / f"{_arm_name(arm)}.jsonl"

    def arm_program(self, arm: str) -> Path:
        """The compiled program of one arm, saved for workers in other processes (``--engine ray``):
        ``<arm>.program``, every character of the arm's name outside ``A-Za-z0-9_.-`` made ``_`` (an artifact's
        name)."""
        return self.path / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', arm)}.program"


def _arm_name(arm: str) -> str:
    return re.sub(r'[^A-Za-z0-9_.+=-]+', '_', arm)


def tag_path_of(rows_file: Path) -> Path:
    """Where the tag of a rows file lives: beside it, named after it (``<rows>.run.json``)."""
    rows_file = Path(rows_file)
    return rows_file.with_name(rows_file.name + TAG_SUFFIX)


def read_rows(path: Path) -> list[dict]:
    """The rows of a predictions file, one per id (the latest: a question asked again on resume appears twice).
    Lines that are not JSON (cut short by a crash) are skipped and named in one warning; a line with wrong field
    types or unknown fields is refused (DataError naming the line and field); bytes that are not UTF-8 read as
    U+FFFD, named in one warning."""
    path = Path(path)
    if not path.exists():
        return []
    rows, bad, _torn = _scan_rows(path)
    _warn_unreadable(path, bad, repaired=False)
    return rows


_WARNED: set[tuple[str, str, tuple[int, ...]]] = set()  # (file, kind, lines) already warned about in this process


def _warn_once(path: Path, kind: str, lines: list[int], message: str, *args: Any) -> None:
    """``log.warning`` unless the same lines of the same file were already reported (a resumed evaluation reads
    its predictions file more than once)."""
    key = (str(Path(path).resolve()), kind, tuple(lines))
    if key in _WARNED:
        return
    _WARNED.add(key)
    log.warning(message, *args)


def _scan_rows(path: Path) -> tuple[list[dict], list[int], int | None]:
    """``(rows, unreadable line numbers, torn)``: ``torn`` is the byte offset where an unreadable last line without
    a newline starts (a row cut short by a crash mid-write), else None."""
    by_id: dict[str, dict] = {}  # a row's place is its id's first line, its content the latest line's
    bad: list[int] = []
    mangled: list[int] = []
    torn = None
    offset = 0
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            start, offset = offset, offset + len(raw)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line = raw.decode("utf-8", errors="replace")
                mangled.append(lineno)
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                bad.append(lineno)
                if not raw.endswith(b"\n"):
                    torn = start
                continue
            by_id[check_row(row, f"{path} line {lineno}")["id"]] = row  # a well-formed row has a string id
    mangled = [n for n in mangled if n not in bad]  # an unreadable line is reported as that
    if mangled:
        shown = ", ".join(map(str, mangled[:10])) + (f" and {len(mangled) - 10} more" if len(mangled) > 10 else "")
        _warn_once(path, "utf8", mangled, "%s: not UTF-8 on line%s %s: the invalid bytes read as U+FFFD", path,
                   "s" if len(mangled) > 1 else "", shown)
    return list(by_id.values()), bad, torn


def _warn_unreadable(path: Path, bad: list[int], repaired: bool) -> None:
    """One warning naming every unreadable line of a predictions file (at most 10 numbers, then a count)."""
    if not bad:
        return
    shown = ", ".join(map(str, bad[:10])) + (f" and {len(bad) - 10} more" if len(bad) > 10 else "")
    cut = " (the last, cut short by a crash, is removed from the file)" if repaired else ""
    _warn_once(path, "unreadable", bad, "%s: %d unreadable line%s skipped: line%s %s%s; their questions are asked "
               "again on resume", path, len(bad), "s" if len(bad) > 1 else "", "s" if len(bad) > 1 else "", shown,
               cut)


def resume_rows(path: Path) -> list[dict]:
    """The rows of ``path`` for a resumed run, with the file repaired first: a last line cut short by a crash is cut
    off (its question is asked again) and a complete last line gets its newline."""
    if not path.exists():
        return []
    rows, bad, torn = _scan_rows(path)
    if torn is not None:
        with open(path, "rb+") as fh:
            fh.truncate(torn)
            fh.flush()
            os.fsync(fh.fileno())
    _warn_unreadable(path, bad, repaired=torn is not None)
    if path.stat().st_size:
        with open(path, "rb+") as fh:
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
    return rows


def lock_folder(folder: Path, what: Path | None = None):
    """Hold an exclusive lock on ``folder/.hqa-lock`` (filelock's ``FileLock``; released by ``close()`` or when the
    process ends), the holder's pid written in it; HQAError at once when another holder has it, naming ``what`` is
    being written (default: the folder)."""
    from filelock import FileLock, Timeout

    class FolderLock(FileLock):
        close = FileLock.release

    path = Path(folder) / LOCK
    held = FolderLock(path)
    try:
        held.acquire(timeout=0)
    except Timeout:
        try:
            holder = path.read_text(encoding="utf-8").strip()
        except OSError:
            holder = ""
        raise HQAError(f"{what or folder} is being written by another run{f' (pid {holder})' if holder else ''}; "
                       "wait for it to finish or use another --out") from None
    path.write_text(str(os.getpid()), encoding="utf-8")
    return held


def check_run_tag(out: Path, tag: dict[str, str] | None, examples: list, resume: bool,
                  rows: list[dict] | None = None) -> None:
    """Refuse to resume a predictions file that another program or dataset wrote (:func:`refuse_foreign_rows`);
    record ``tag`` beside it (``<out>.run.json``).  With ``resume=False`` the old rows are discarded anyway and the
    tag is replaced."""
    refuse_foreign_rows(out, tag, examples, resume, rows)
    if tag:
        write_atomic(tag_path_of(out), json.dumps(tag, sort_keys=True) + "\n")


def refuse_foreign_rows(out: Path, tag: dict[str, str] | None, examples: list, resume: bool,
                        rows: list[dict] | None = None) -> None:
    """DataError when resuming ``out`` would mix in rows another program or dataset wrote (writes nothing).  A file
    without a tag (from before tags) is checked by its rows' ``dataset`` (``rows``: already read)."""
    tag_path = tag_path_of(out)
    if resume and out.exists() and out.stat().st_size:
        if tag_path.exists():
            try:
                old = json.loads(tag_path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                old = None
            if tag and old != tag:
                raise DataError(f"{out} holds rows of {_describe(old)}, not {_describe(tag)}: pass --fresh to "
                                "discard them, or --out another folder")
        else:
            have = {r.get("dataset") for r in (read_rows(out) if rows is None else rows)}
            want = {ex.get("dataset") for ex in examples}
            if have - want:
                raise DataError(f"{out} holds rows of dataset {', '.join(sorted(map(str, have - want)))}, not "
                                f"{', '.join(sorted(map(str, want)))}: pass --fresh to discard them, or --out another "
                                "folder")


def _describe(tag: dict | None) -> str:
    if not isinstance(tag, dict):
        return "an unreadable run tag"
    return " on ".join(f"{k} {tag[k]}" for k in sorted(tag))


__all__ = ["CompareFolder", "Run", "IMPORT", "LOCK", "PLOTS", "POOLED", "PROGRAM", "ROWS", "RunFolder", "RUN_INFO", "SUMMARY_JSON", "SUMMARY_MD",
           "TAG_SUFFIX", "check_run_tag", "lock_folder", "read_rows", "refuse_foreign_rows", "resume_rows", "tag_path_of"]
