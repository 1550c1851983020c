"""``hqa ask`` ends its process right after the answer (issue 31, cold start): stdout and stderr flushed, threads
finished, the atexit handlers run, then ``os._exit`` with the command's code; every other command, and a failed ask,
exits normally."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import dspy
import pytest

import hqa.app
import hqa.cli.entry as cli


class _Program(dspy.Module):
    def forward(self, question):
        return dspy.Prediction(answer="George Orwell", trace={"program": "scripted"})


class _Exited(Exception):
    pass


@pytest.fixture()
def exits(monkeypatch, tmp_path):
    (tmp_path / "hqa.toml").write_text("")
    monkeypatch.setenv("HQA_CONFIG", str(tmp_path / "hqa.toml"))
    monkeypatch.setenv("HQA_PATHS__ARTIFACTS", str(tmp_path / "art"))
    monkeypatch.setattr(hqa.app, "open_program",
                        lambda *a, **kw: SimpleNamespace(program=_Program(), warnings=[], toolbox=None))
    monkeypatch.setattr(hqa.app, "prefetch", lambda opened: SimpleNamespace(join=lambda: None))
    monkeypatch.setattr(cli, "_FAST_EXIT", [])
    seen: list = []

    def fake_os_exit(code):
        seen.append(("os._exit", code))
        raise _Exited

    import atexit

    import threading

    monkeypatch.setattr(cli.os, "_exit", fake_os_exit)
    monkeypatch.setattr(atexit, "_run_exitfuncs", lambda: seen.append(("atexit",)))
    monkeypatch.setattr(threading, "_shutdown", lambda: seen.append(("threads",)))
    return seen


def test_a_finished_ask_flushes_runs_atexit_and_ends_at_once(exits, monkeypatch, capsys):
    flushed = []
    monkeypatch.setattr(sys, "argv", ["hqa", "ask", "Who wrote Animal Farm?"])
    real_flush = sys.stdout.flush
    monkeypatch.setattr(sys.stdout, "flush", lambda: (flushed.append(True), real_flush())[1])
    with pytest.raises(_Exited):
        cli.run()
    assert exits == [("threads",), ("atexit",), ("os._exit", 0)]
    assert flushed and "A: George Orwell" in capsys.readouterr().out


def test_other_commands_and_a_failed_ask_exit_normally(exits, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["hqa", "ask", "   "])  # an empty question: an error, exit code 1
    with pytest.raises(SystemExit) as exc:
        cli.run()
    assert exc.value.code != 0 and exits == []
    monkeypatch.setattr(sys, "argv", ["hqa", "config", "path"])
    with pytest.raises(SystemExit) as exc:
        cli.run()
    assert exc.value.code == 0 and exits == []
