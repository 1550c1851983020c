"""A compiled ``dpp-human`` program names its predictors and the demos each used, per question: the step events of
``hqa serve``'s stream carry each predictor's own name (not its signature's class, which every loaded signature
shares), the answer names the human processes the DPP chose for the step predictor and the merge few-shots by their
library ids, and a predictions row names the same demos."""

from __future__ import annotations

import json

import dspy
import pytest
from dspy.utils import DummyLM
from fastapi.testclient import TestClient
from lmkit import UsageLM
from prockit import AGENT_SCRIPT, events_of

from hqa.optimize.compile import CompileOptions
from hqa.jobs.compile import compile_and_save

Q = "What is the capital of Gabon?"


@pytest.fixture(scope="module")
def compiled(built_pack, tmp_path_factory):
    """``hqa compile --program humaniq --optimizer dpp-human --no-eval`` (free answers, as the script replies)."""
    from hqa.config import load_settings
    from pathlib import Path

    tmp = tmp_path_factory.mktemp("dpp-names")
    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(built_pack),
                             tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}", programs_answer_mode="free")
    settings.paths.artifacts = str(tmp)  # the compiled program goes here; the pack is linked in
    (tmp / "pack").symlink_to(built_pack / "pack")
    opts = CompileOptions(program="humaniq", optimizer="dpp-human", train="compmix/dev", dev="humaniq-compmix",
                          train_limit=4, dev_limit=2, metric="recall")
    with dspy.context(lm=DummyLM([{"answer": "X"}] * 5), adapter=dspy.ChatAdapter()):
        result = compile_and_save(settings, opts, name="humaniq-dpp", evaluate_dev=False)
    return settings, result["artifact"]


def _served(settings, artifact):
    from hqa.app import open_program
    from hqa.retrievers.base import Evidence
    from hqa.toolbox import Toolbox
    from hqa.serve import create_app

    def dense(query, k=5):
        return [Evidence(text="Libreville is the capital and largest city of Gabon.", source="text", score=0.9,
                         meta={"id": "p-test", "title": "Libreville"})][:k]

    opened = open_program(settings, load=artifact, configure=False, toolbox=Toolbox(settings, dense=dense))
    return opened, create_app(opened)


def test_served_dpp_program_names_its_steps_and_the_demos_each_used(compiled):
    settings, artifact = compiled
    opened, app = _served(settings, artifact)
    dspy.configure(lm=UsageLM(list(AGENT_SCRIPT)), adapter=dspy.ChatAdapter())
    try:
        with TestClient(app) as client:
            r = client.post("/v1/ask/stream", json={"question": Q})
    finally:
        dspy.configure(lm=None)
    seen = events_of(r.text.splitlines())
    done = [e for kind, e in seen if kind == "step" and e.get("status") == "done"]
    assert [e["predictor"] for e in done] == ["react"] * 3 + ["relevant_page", "react", "sources.parametric",
                                                              "sources.merge"]
    kind, answer = seen[-1]
    assert kind == "answer" and answer["answer"] == "Libreville", answer
    chosen = answer["trace"]["demos"]  # the DPP's choice for this question, in selection order
    assert len(chosen) == 3 and all(i.startswith("compmix:") for i in chosen)
    demos = answer["demos"]
    assert [d["id"] for d in demos["react"]] == chosen  # the step prompts held exactly the chosen processes
    merge = [d["id"] for d in demos["sources.merge"]]
    assert merge and all(i.startswith("compmix_merge:") for i in merge)  # the benchmark's merge few-shots
    assert all(d["id"] for listed in demos.values() for d in listed)  # every demo named (the shipped ones too)


def test_rows_and_ask_json_name_the_demos_per_predictor(compiled, capsys, monkeypatch):
    from hqa.cli import args as cli_args, entry as cli
    from hqa.jobs.evaluate import run_one
    from hqa.schemas.records import check_row

    settings, artifact = compiled
    opened, _app = _served(settings, artifact)
    with dspy.context(lm=UsageLM(list(AGENT_SCRIPT)), adapter=dspy.ChatAdapter()):
        row = run_one(opened.program, dspy.Example(id="g1", question=Q, answers=["Libreville"],
                                                   answer_ids=[]).with_inputs("question"))
    assert row["error"] is None and row["answer"] == "Libreville"
    assert row["demos"]["react"] == row["trace"]["demos"] and len(row["demos"]["react"]) == 3
    assert all(i.startswith("compmix_merge:") for i in row["demos"]["sources.merge"])
    assert row["trace"]["program"] == "humaniq"
    assert check_row(json.loads(json.dumps(row)), "row") is not None

    import hqa.app

    monkeypatch.setattr(hqa.app, "open_program", lambda *a, **k: opened)
    monkeypatch.setattr(hqa.app, "prefetch", lambda o: type("W", (), {"join": lambda self: None})())
    monkeypatch.setattr(cli_args, "settings", lambda args: settings)
    dspy.configure(lm=UsageLM(list(AGENT_SCRIPT)), adapter=dspy.ChatAdapter())
    try:
        assert cli.main(["ask", "--json", Q]) == 0
    finally:
        dspy.configure(lm=None)
    out = json.loads(capsys.readouterr().out)
    assert out["demos"]["react"] == out["trace"]["demos"] == row["demos"]["react"]  # same question, same choice
    assert {k: out[k] for k in ("answer", "abstained", "reason")} == {"answer": "Libreville", "abstained": False,
                                                                      "reason": None}

