"""Shards for any scheduler (issue 55): ``hqa evaluate --shard i/N`` answers a deterministic slice of a dataset into
its own run folder, and ``hqa runs merge`` joins the N shard folders into one run folder whose rows, report and
``run-info.json`` are those of one run over the whole dataset.  A SLURM array (``--shard $((SLURM_ARRAY_TASK_ID))/N``),
a provider's batch jobs or N shells can each run one shard without Ray.

The slice: shard ``i`` of ``N`` holds the dataset's questions at positions ``i-1, i-1+N, i-1+2N, …`` (after
``--limit``), so every question is in exactly one shard, the shards differ in size by at most one, and a shard's
questions are the same on every machine that has the dataset.  Each shard folder records its slice (``run-info.json``
``shard``: index, count, the dataset's size and the shard's ids) and its tag names the shard, so a shard folder is
resumed only by the same shard of the same run.

The merge checks, before writing anything, that the folders are shards of one run — the same dataset and limit,
program (and its kwargs), LM and shard count — and names what is wrong otherwise: a shard missing or given twice, a
question answered in two shards (a duplicate), a question of a shard's slice with no row (a gap: that shard has not
finished; run it again and it resumes).  The merged folder holds the rows in the dataset's order, the run's tag
without the shard (so ``hqa evaluate`` on the whole dataset resumes from it), the first shard's ``run-info.json``
with the shard removed and the command of the whole run, and the report, written from those rows as for one run.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from hqa.errors import ConfigError, DataError

__all__ = ["Shard", "merge_runs"]

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        """``"i/N"`` with 1 ≤ i ≤ N (ConfigError otherwise)."""
        match = _SHARD.match(str(text or ""))
        if not match:
            raise ConfigError(f"--shard must read i/N (e.g. 2/8: the second of 8 shards), got {text!r}")
        index, count = int(match.group(1)), int(match.group(2))
        if count < 1 or not 1 <= index <= count:
            raise ConfigError(f"--shard {text}: i must be between 1 and N (N at least 1)")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def label(self) -> str:
        """The default folder's suffix: ``shard2of8``."""
        return f"shard{self.index}of{self.count}"

    def take(self, examples: Sequence[Any]) -> list:
        """This shard's examples: positions ``index-1``, ``index-1+count``, … of ``examples``."""
        return list(examples[self.index - 1::self.count])

    def record(self, examples: Sequence[Any], ids: Sequence[str]) -> dict:
        """What ``run-info.json`` keeps of the slice: index, count, the dataset's size and this shard's ids."""
        return {"index": self.index, "count": self.count, "total": len(examples), "ids": list(ids)}


#: what must be the same in every shard's ``run-info.json`` (beside its tag's program, kwargs and dataset)
_SAME = ("program", "program_kwargs", "dataset", "limit", "lm", "seed", "arm")


def _read_shard(folder: Path) -> dict:
    from hqa.schemas.run_folder import RunFolder

    rf = RunFolder(folder)
    info, tag = rf.info(), rf.tag()
    if not rf.rows_path.exists() or not tag:
        raise DataError(f"{folder} is not a run folder written by hqa evaluate (no predictions.jsonl and its tag)")
    shard = info.get("shard")
    if not isinstance(shard, dict) or "index" not in shard or "count" not in shard:
        raise DataError(f"{folder} is not a shard: it was not written by hqa evaluate --shard i/N")
    return {"folder": Path(folder), "info": info, "tag": tag, "shard": shard, "rows": rf.rows()}


def _describe(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list)) else str(value)


def merge_runs(folders: Sequence[Path], out: Path, *, title: str | None = None) -> dict:
    """Merge shard run folders into ``out`` (see the module docstring); returns ``{"folder", "n", "shards"}``.
    DataError naming every difference, missing or repeated shard, duplicate question and gap; nothing is written
    then."""
    from hqa.io.files import write_atomic
    from hqa.jobs.run_info import write_run_info
    from hqa.reports.summary import write_report
    from hqa.schemas.run_folder import RunFolder, lock_folder

    if not folders:
        raise ConfigError("hqa runs merge needs the shard folders")
    shards = [_read_shard(Path(f)) for f in folders]
    first = shards[0]
    problems: list[str] = []
    base_tag = {k: v for k, v in first["tag"].items() if k != "shard"}
    for s in shards[1:]:
        tag = {k: v for k, v in s["tag"].items() if k != "shard"}
        if tag != base_tag:
            problems.append(f"{s['folder']} is a run of {_describe(tag)}, {first['folder']} of {_describe(base_tag)}")
        for key in _SAME:
            if s["info"].get(key) != first["info"].get(key):
                problems.append(f"{s['folder']} has {key} {_describe(s['info'].get(key))}, {first['folder']} "
                                f"{_describe(first['info'].get(key))}")
    counts = {int(s["shard"]["count"]) for s in shards}
    totals = {int(s["shard"].get("total", -1)) for s in shards}
    if len(counts) > 1:
        problems.append(f"the folders are shards of different splits: of {', '.join(map(str, sorted(counts)))}")
    if len(totals) > 1:
        problems.append(f"the shards slice datasets of different sizes: {', '.join(map(str, sorted(totals)))}")
    count = max(counts)
    seen: dict[int, Path] = {}
    for s in shards:
        index = int(s["shard"]["index"])
        if index in seen:
            problems.append(f"shard {index}/{count} is given twice: {seen[index]} and {s['folder']}")
        seen.setdefault(index, s["folder"])
    missing = [i for i in range(1, count + 1) if i not in seen]
    if missing:
        problems.append(f"shard{'s' if len(missing) > 1 else ''} {', '.join(f'{i}/{count}' for i in missing)} "
                        "missing")
    owner: dict[str, Path] = {}
    duplicates: list[str] = []
    gaps: list[str] = []
    order: list[str] = []
    rows: dict[str, dict] = {}
    for s in sorted(shards, key=lambda s: int(s["shard"]["index"])):
        expected = [str(i) for i in s["shard"].get("ids") or []]
        answered = {r["id"]: r for r in s["rows"]}
        for rid in answered:
            if rid in owner and owner[rid] != s["folder"]:
                duplicates.append(f"{rid} ({owner[rid]} and {s['folder']})")
            owner.setdefault(rid, s["folder"])
        absent = [i for i in expected if i not in answered]
        if absent:
            gaps.append(f"{len(absent)} of shard {s['shard']['index']}/{count}'s {len(expected)} questions have no "
                        f"row in {s['folder']} (e.g. {', '.join(absent[:3])}): run that shard again, it resumes")
        for rid in expected:
            if rid in answered:
                rows[rid] = answered[rid]
    if duplicates:
        problems.append(f"{len(duplicates)} question{'s' if len(duplicates) > 1 else ''} answered in two shards: "
                        + "; ".join(duplicates[:5]) + (" …" if len(duplicates) > 5 else ""))
    problems += gaps
    if problems:
        raise DataError("cannot merge these shards: " + "; ".join(problems))
    # the rows in the dataset's order: shard i holds positions i-1, i-1+N, ... (hqa.jobs.shards.Shard.take)
    slices = {int(s["shard"]["index"]): [str(i) for i in s["shard"].get("ids") or []] for s in shards}
    total = max(totals)
    for k in range(total):
        shard_ids = slices[k % count + 1]
        order.append(shard_ids[k // count])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    held = lock_folder(out)
    try:
        rf = RunFolder(out)
        text = "".join(json.dumps(rows[i], ensure_ascii=False, default=str) + "\n" for i in order)
        write_atomic(rf.rows_path, text)
        write_atomic(rf.tag_path, json.dumps(base_tag, sort_keys=True) + "\n")
        info = {k: v for k, v in first["info"].items() if k not in ("shard", "git")}
        info["command"] = _unsharded(str(info.get("command") or ""))
        info["merged_from"] = [str(s["folder"]) for s in sorted(shards, key=lambda s: int(s["shard"]["index"]))]
        info["mlflow_run_id"] = None  # each shard has its own MLflow run (merged_from names their folders)
        write_run_info(out, **info)
        label = info.get("label") or base_tag.get("program")
        write_report(out, title=title or f"{label} on {base_tag.get('dataset')}")
    finally:
        held.close()
    return {"folder": out, "n": len(order), "shards": count}


def _unsharded(command: str) -> str:
    """``command`` without its ``--shard i/N``."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
            continue
        if word == "--shard":
            skip = True
            continue
        if word.startswith("--shard="):
            continue
        out.append(word)
    return shlex.join(out)
