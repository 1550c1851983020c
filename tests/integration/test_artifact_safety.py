"""Edited manifests, program states and predictions rows are refused with one line naming the field; evaluation
folders are locked; the CLI's last-resort handler turns any unexpected exception into one line plus a log file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prockit import run_hqa as hqa
from rowkit import CLOSEDBOOK_ROW as GOOD, edit_manifest

from hqa.errors import ArtifactError, DataError, HQAError
from hqa.schemas.run_folder import lock_folder, read_rows
from hqa.artifacts.store import load_program, save_artifact

REPO = Path(__file__).resolve().parent.parent.parent


def one_line(proc: subprocess.CompletedProcess, needle: str, code: int = 2) -> str:
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hqa: error: ") and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


# -- manifests and program states ------------------------------------------------------------------------------
@pytest.fixture()
def cfg(settings_for):
    return settings_for()


@pytest.fixture()
def detllm_art(tmp_path):
    from hqa.programs.detllm import DETLLM

    return save_artifact(DETLLM(hops=2), tmp_path / "d", {"program": "detllm", "program_kwargs": {"hops": 2}})


@pytest.mark.parametrize("changes,field", [
    ({"program_kwargs": {"nope": 1}}, "program_kwargs.nope"),
    ({"program_kwargs": "hops=2"}, "program_kwargs"),
    ({"program_kwargs": {"hops": "many"}}, "program_kwargs.hops"),
    ({"program_kwargs": {"hops": -5}}, "program_kwargs.hops"),
    ({"program_kwargs": {"hops": 10**9}}, "program_kwargs.hops"),
    ({"program_kwargs": {"temperature": float("inf")}}, "program_kwargs.temperature"),
    ({"versions": "x"}, "versions"),
    ({"versions": {"dspy": 3}}, "versions"),
    ({"program": "nope"}, "program"),
    ({"program": ["detllm"]}, "program"),
    ({"wrapper": "evil"}, "wrapper"),
    ({"planted": 1}, "manifest.json: unknown field 'planted'"),  # hqa.schemas.records.ArtifactManifest, extra="forbid"
    ({"metrics": [1]}, "field 'metrics' has the wrong type (list)"),
    ({"pack_version": 3}, "field 'pack_version' has the wrong type (int)"),
    # valid fields, another program: the manifest's own checksum refuses it (issue 40)
    ({"program": "closedbook", "program_kwargs": {}}, "manifest.json does not match its checksum"),
])
def test_edited_manifest_is_refused_naming_the_field(cfg, detllm_art, changes, field):
    load_program(detllm_art, cfg)  # sound before the edit
    edit_manifest(detllm_art, **changes)
    with pytest.raises(ArtifactError) as err:
        load_program(detllm_art, cfg)
    assert field in str(err.value) and "\n" not in str(err.value)


def test_program_kwargs_on_the_command_line(tmp_path):
    one_line(hqa("compile", "--program", "closedbook", "--program-kwargs", "not json", cwd=tmp_path),
             "--program-kwargs is not JSON")
    one_line(hqa("compile", "--program", "detllm", "--program-kwargs", '{"hops": "many"}', cwd=tmp_path),
             "program_kwargs.hops")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(sorted(GOOD) + ["x"]),
                       st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.lists(st.integers(), max_size=2)
                       | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), max_size=6))
def test_any_row_is_either_read_whole_or_refused(tmp_path, row):
    path = tmp_path / "p.jsonl"
    merged = {**GOOD, **row}
    path.write_text(json.dumps(merged) + "\n")
    try:
        rows = read_rows(path)
    except DataError as exc:
        assert "line 1" in str(exc)
        return
    from hqa.reports.summary import summarize_rows

    summary = summarize_rows(rows)  # an accepted row can be reported
    assert summary["n"] == 1


def test_report_show_and_resume_refuse_a_bad_row_in_one_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text(json.dumps({**GOOD, "scores": []}) + "\n")
    one_line(hqa("report", "show", str(run), cwd=tmp_path), "field 'scores' must be dict")
    (run / "predictions.jsonl").write_text("{}\n")
    one_line(hqa("report", "show", str(run), cwd=tmp_path), "lacks field 'id'")


def test_evaluate_limit_zero_is_refused_without_a_folder(tmp_path):
    one_line(hqa("evaluate", "--program", "closedbook", "--dataset", "mintaka", "--limit", "0", "--out",
                 str(tmp_path / "out"), cwd=tmp_path), "--limit must be at least 1")
    assert not (tmp_path / "out").exists()


# -- the folder lock -------------------------------------------------------------------------------------------
def test_second_writer_of_a_folder_is_refused(tmp_path):
    held = lock_folder(tmp_path)
    try:
        code = ("import sys; from hqa.schemas.run_folder import lock_folder; from hqa.errors import HQAError\n"
                "try:\n    lock_folder(sys.argv[1])\nexcept HQAError as e:\n    print(e); sys.exit(3)\n")
        proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
        assert proc.returncode == 3 and f"pid {os.getpid()}" in proc.stdout and "another run" in proc.stdout
        with pytest.raises(HQAError, match="another run"):  # a second open file in the same process too
            lock_folder(tmp_path)
    finally:
        held.close()
    lock_folder(tmp_path).close()  # released


# -- last-resort handler ---------------------------------------------------------------------------------------
PLANTED = """
import sys
import hqa.cli.config
import hqa.cli.entry as cli

def boom(args):
    raise ZeroDivisionError("planted")

hqa.cli.config.run = boom  # an internal bug in a command
sys.exit(cli.main(sys.argv[1:]))
"""


def test_unexpected_exception_is_one_line_with_a_log_and_debug_shows_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    env["PYTHONPATH"] = str(REPO)

    def run(*args):
        return subprocess.run([sys.executable, "-c", PLANTED, *args], capture_output=True, text=True, cwd=tmp_path,
                              env=env, timeout=300)

    line = one_line(run("config", "show"), "unexpected ZeroDivisionError: planted", code=1)
    log = Path(line.split("details in ")[1].split(";")[0])
    assert "Traceback" in log.read_text() and "planted" in log.read_text()
    log.unlink()
    debug = run("--debug", "config", "show")
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "ZeroDivisionError" in debug.stderr


def test_evaluate_resume_refuses_a_bad_row_in_one_line(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "predictions.jsonl").write_text(json.dumps({**GOOD, "answer": ["A"]}) + "\n")
    before = (out / "predictions.jsonl").read_text()
    proc = hqa("evaluate", "--program", "closedbook", "--dataset", "mintaka", "--limit", "1", "--out", str(out),
               cwd=tmp_path, env_extra={"HQA_PATHS__ARTIFACTS": str(tmp_path / "art")})
    one_line(proc, "line 1: field 'answer' must be str")
    assert (out / "predictions.jsonl").read_text() == before  # nothing lost or appended
