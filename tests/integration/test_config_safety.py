"""`hqa config set/reset` keep hqa.toml valid, commented, mode-preserved and symlinked; every setting is range-checked."""

from __future__ import annotations

import os
import stat
import subprocess
import tomllib

from prockit import run_hqa as hqa


def one_line_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hqa: error: ") and needle in lines[0], proc.stderr


def test_broken_file_is_repaired_from_the_cli(tmp_path):
    cfg = tmp_path / "hqa.toml"
    broken = '[lm]\nmodel = "x\ny"\n'
    cfg.write_text(broken)
    os.chmod(cfg, 0o640)
    one_line_error(hqa("config", "show", cwd=tmp_path), "not valid TOML")
    one_line_error(hqa("config", "set", "lm.model", "ok", cwd=tmp_path), "hqa config reset")
    done = hqa("config", "reset", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "hqa.toml.bak").read_text() == broken  # nothing lost
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o640
    assert hqa("config", "set", "lm.model", "ok", cwd=tmp_path).returncode == 0
    assert tomllib.loads(cfg.read_text())["lm"]["model"] == "ok"


def test_set_via_cli_newline_value_is_one_line_error(tmp_path):
    one_line_error(hqa("config", "set", "lm.model", "x\ny", cwd=tmp_path), "control character")
    assert not (tmp_path / "hqa.toml").exists()


def test_hqa_config_pointing_at_a_directory_is_one_line(tmp_path):
    one_line_error(hqa("config", "show", cwd=tmp_path, env_extra={"HQA_CONFIG": str(tmp_path)}), "is a directory")
    one_line_error(hqa("config", "set", "lm.model", "m", cwd=tmp_path, env_extra={"HQA_CONFIG": str(tmp_path)}),
                   "is a directory")
