"""Artifacts keep the previous version on a failed save; compile options are validated; the paired bootstrap
and the mapping of human traces onto DETLLM hops (the compile round trips are in tests/integration/test_optimize.py)."""

from pathlib import Path

import pytest
from compilekit import opts

from hqa.artifacts.store import save_artifact
from hqa.errors import ConfigError
from hqa.scoring.stats import paired_bootstrap


def test_interrupted_save_leaves_previous_artifact(tmp_path, monkeypatch):
    from hqa.programs.closedbook import ClosedBook

    prog = ClosedBook()
    dest = save_artifact(prog, tmp_path / "cb", {"program": "closedbook", "program_kwargs": {}, "metrics": {"em": 1}})
    before = (dest / "manifest.json").read_text()

    def boom(path, *a, **k):
        Path(path).write_text("partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(prog, "save", boom)
    with pytest.raises(KeyboardInterrupt):
        save_artifact(prog, dest, {"program": "closedbook", "program_kwargs": {}, "metrics": {"em": 0}})
    assert (dest / "manifest.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cb"]


def test_options_are_validated():
    with pytest.raises(ConfigError, match="human demonstrations"):
        opts(program="closedbook", optimizer="dpp-human").validate()
    with pytest.raises(ConfigError, match="unknown optimizer"):
        opts(optimizer="magic").validate()
    with pytest.raises(ConfigError, match="unknown metric"):
        opts(metric="bleu").validate()


def test_bootstrap_ci_brackets_the_mean():
    lo, hi = paired_bootstrap([1.0] * 7 + [0.0] * 3, seed=1)
    assert lo <= 0.7 <= hi and 0.0 <= lo < hi <= 1.0
    assert paired_bootstrap([1.0, 1.0, 1.0]) == (1.0, 1.0)


def test_human_trace_maps_onto_detllm_hops():
    from hqa.data.human import load_human_library
    from hqa.programs.detllm import human_hop_demos

    demo = load_human_library(("mintaka",))[0]  # the Missouri River solution process
    demos = human_hop_demos(demo, hops=2)
    h1, h2 = demos["hop1"], demos["hop2"]
    assert h1.search_query == "longest river in the united states" and h1.query_entity == "United States"
    assert h1.sparql.startswith("SELECT DISTINCT ?x1 ?x5") and h1.context == [] and h1.hop == 1
    assert h1.rationale.startswith("First, need to look up longest river")
    assert h2.query_entity == "" and h2.sparql.lower().startswith("select ?river")
    assert len(h2.context) == 1 and h2.context[0].startswith("[text] Page: List of longest rivers")
    assert demos["answer"].answer == "Missouri river" and all(d.source == "human" for d in demos.values())
