"""HumanIQ's compare over several benchmarks (``hqa compare --dev A,B``) under a scripted LM, each arm drawing on its
benchmark's library (the rendered prompts themselves: tests/unit/programs/test_humaniq_prompts.py)."""

from __future__ import annotations

from pathlib import Path

import dspy
from dspy.utils import DummyLM
from humaniqkit import raiders_page
from lmkit import step

from hqa.optimize.compile import CompileOptions
from hqa.toolbox import Toolbox


def test_compare_runs_the_arms_on_each_benchmark_with_its_own_library(settings_for, tmp_path, monkeypatch):
    """``hqa compare --dev A,B``: one compare per benchmark, each arm's program drawing on that benchmark's library;
    a summary with the metric per benchmark and aggregated."""
    from hqa.jobs import compare as jobs

    settings = settings_for(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", programs_answer_mode="free")
    tb = Toolbox(settings, dense=raiders_page)
    libraries: list[tuple[str, str, set]] = []
    real = jobs.compile_program

    def spy(opts, train, dev, toolbox=None, student=None):  # a fresh student given the raiders page
        program, info = real(opts, train, dev, tb)
        libraries.append((opts.dev, opts.optimizer, {d.dataset for d in getattr(program, "library", [])}))
        return program, info

    monkeypatch.setattr(jobs, "compile_program", spy)
    finish = step("done", "Finish", "Wikipedia_Answer: X, Wikidata_Answer: [X]\n\nAssistant Response: X.")
    lm = DummyLM([finish, {"answer": "X"}, {"answer": "X"}] * 10)
    base = CompileOptions(program="hqa", dev="humaniq-compmix", dev_limit=1, train_limit=1, metric="recall")
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        out = jobs.compare_benchmarks(settings, base, ("humaniq-compmix", "mintaka"),
                                      arms=("dpp-human@0", "random-human@1"), out_dir=tmp_path / "cmp")
    assert libraries == [("humaniq-compmix", "dpp-human", {"compmix"}),
                         ("humaniq-compmix", "random-human", {"compmix"}),
                         ("mintaka", "dpp-human", {"mintaka"}), ("mintaka", "random-human", {"mintaka"})]
    assert [r["arm"] for r in out["rows"]] == ["dpp-human@0", "random-human@1"]
    assert set(out["rows"][0]) == {"arm", "humaniq-compmix", "mintaka", "aggregated"}
    assert "| dpp-human@0 |" in Path(out["table"]).read_text()
