"""Answerable subsets on a hand-built pack where the expected subset is known question by question."""

from __future__ import annotations


def test_cli_rejects_an_unknown_modifier_in_one_line(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env["HQA_PATHS__ARTIFACTS"] = str(tmp_path / "artifacts")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "hqa.cli", "evaluate", "--program", "simple", "--dataset",
                           "compmix/test:solvable", "--out", str(out)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "hqa: error: unknown dataset modifier 'solvable' in 'compmix/test:solvable'; valid: answerable")
    assert not out.exists()
