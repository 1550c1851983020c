"""`hqa ask` loads the toolbox in a background thread while the first LM call runs; a part that cannot load is left
for the program to report."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from hqa.app import OpenedProgram, open_program, prefetch
from hqa.config import load_settings
from hqa.errors import HQAError
from hqa.toolbox import Toolbox

PARTS = {"sparql", "linker", "dense", "bm25", "reranker"}


@pytest.fixture()
def thread_errors(monkeypatch):
    seen: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))
    return seen


def test_prefetch_loads_the_toolbox_in_the_background(settings_for, thread_errors):
    opened = open_program(settings_for(), program="simple", configure=False)
    tb = opened.toolbox
    assert not (PARTS - {"sparql"}) & tb.built()  # nothing loaded yet but the store open_program checked
    thread = prefetch(opened)
    thread.join(timeout=300)
    assert not thread.is_alive() and thread.daemon and not thread_errors
    assert PARTS <= tb.built()
    assert tb.reranker._resolved  # the cross-encoder question is settled too
    assert tb.dense("river through Vienna", k=1)  # and the loaded parts answer


def test_prefetch_leaves_a_failing_part_to_the_program(tmp_path, thread_errors):
    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(tmp_path / "empty"))
    tb = Toolbox(settings)
    thread = prefetch(OpenedProgram(program=None, label="simple", kind="simple", source="program", toolbox=tb))
    thread.join(timeout=120)
    assert not thread.is_alive() and not thread_errors
    with pytest.raises(HQAError, match="hqa pack build"):
        _ = tb.linker  # the program meets the same failure itself and reports it
