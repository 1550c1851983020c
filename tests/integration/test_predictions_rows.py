"""predictions.jsonl read back on resume and by ``hqa report show``: a wrong-typed ``id`` is refused like every other
wrong type, unreadable lines are named in one warning, and a torn last line is repaired on resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from rowkit import ROW as GOOD


REPO = Path(__file__).resolve().parent.parent.parent


def _report_show(run: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env.update(PYTHONPATH=str(REPO), MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-m", "hqa.cli", "report", "show", str(run)], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=300)


def test_report_show_refuses_a_numeric_id_in_one_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text(json.dumps({**GOOD, "id": 3}) + "\n")
    proc = _report_show(run, tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "line 1: field 'id' must be str, got int" in lines[0], proc.stderr


def test_report_show_names_the_unreadable_lines_once(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [json.dumps({**GOOD, "id": f"q{i}"}) for i in range(3)]
    (run / "predictions.jsonl").write_text("\n".join([rows[0], "{oops", rows[1], "nope", rows[2]]) + "\n")
    proc = _report_show(run, tmp_path)
    assert proc.returncode == 0, proc.stderr
    named = [line for line in proc.stderr.splitlines() if "unreadable" in line]
    assert len(named) == 1 and "2 unreadable lines skipped: lines 2, 4" in named[0], proc.stderr
