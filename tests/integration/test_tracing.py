"""MLflow traces for every entry point and MLflow evaluation results for ``hqa evaluate``, against real MLflow stores
(sqlite under the test's temp folder): a question is a trace whose spans hold the LM calls and the agent's tool calls
(``tracking.traces = true`` or ``--trace``), tagged with — and linked to — the logged model it was answered by; an
evaluation's rows become ``mlflow.genai.evaluate`` results with hqa's metrics as scorers, one trace per question."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import dspy
import mlflow
import pytest
from dspy.utils import DummyLM
from lmkit import QUESTION as Q, _FakeOpenAI, step
from mlflow.entities import SpanType
from prockit import clean_env

from hqa.config import load_settings
from hqa.jobs.evaluate import GENAI_SCORERS, evaluate, log_genai_evaluation
from hqa.tracking import runs as tracing
from hqa.optimize import mlflow_model
from hqa.tracking import registry as tracking
from hqa.artifacts.store import save_artifact
from hqa.programs.closedbook import ClosedBook
from hqa.programs.humaniq import HumanIQAgent

REPO = Path(__file__).resolve().parent.parent.parent


def settings_at(art: Path):
    return load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(art))


@pytest.fixture()
def traced():
    """Tracing switched off again after the test: DSPy autologging, the active model, hqa's trace-tag callback."""
    yield
    mlflow.dspy.autolog(disable=True)
    mlflow.clear_active_model()
    tags = tracing._trace_tags_class()
    dspy.settings.configure(callbacks=[c for c in dspy.settings.callbacks if not isinstance(c, tags)],
                            track_usage=False)


def traces_of(settings) -> list:
    mlflow.flush_trace_async_logging()  # traces are written by a background thread
    mlflow.set_tracking_uri(settings.tracking_uri)
    exp = mlflow.get_experiment_by_name(settings.tracking.experiment)
    if exp is None:
        return []
    return mlflow.search_traces(locations=[exp.experiment_id], return_type="list", include_spans=True)


def test_agent_question_is_a_trace_with_tool_and_lm_spans(pack_toolbox, tmp_path, traced):
    settings = settings_at(tmp_path)
    opened = SimpleNamespace(label="hqa_agent", kind="hqa_agent", source="program")
    assert tracing.enable_traces(settings, opened) == {"hqa.program": "hqa_agent", "hqa.kind": "hqa_agent"}
    answers = [
        step("Find the QID of Gabon", "GetWikidataID", "Gabon"),
        step("Query its capital", "RunSparql", "SELECT ?x WHERE { wd:Q1000 wdt:P36 ?x }"),
        step("Label the result", "GetLabel", "[Q3825]"),
        step("Done", "Finish", "Wikipedia_Answer: None, Wikidata_Answer: [Libreville]"),
        {"answer": "Paris"},  # parametric
        {"answer": "Libreville"},  # merge
    ]
    lm = DummyLM(answers)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = HumanIQAgent(toolbox=pack_toolbox)(question=Q)
    assert pred.answer == "Libreville"
    (trace,) = traces_of(settings)
    assert trace.info.tags["hqa.program"] == "hqa_agent"
    tools = [s for s in trace.data.spans if s.span_type == SpanType.TOOL]
    assert [s.name for s in tools] == ["GetWikidataID", "RunSparql", "GetLabel"]
    assert tools[0].inputs == {"input": "Gabon"} and tools[0].outputs.startswith("['Q1000'")
    assert "Q3825" in tools[1].outputs and tools[2].outputs == "['Libreville']"
    assert all(s.parent_id for s in tools)  # inside the question's trace, under the agent's module spans
    lm_spans = [s for s in trace.data.spans if s.span_type == SpanType.CHAT_MODEL]  # the LM calls themselves
    assert len(lm_spans) == len(lm.history) == len(answers)


def test_trace_of_a_logged_model_is_linked_to_it(tmp_path, traced):
    from hqa.app import open_program

    settings = settings_at(tmp_path)
    dest = save_artifact(ClosedBook(), tmp_path / "programs" / "cb", {"program": "closedbook", "program_kwargs": {}})
    with tracking.run(settings, "compile:cb", autolog=False):
        assert mlflow_model.log_program(dest, settings=settings, register="cb") is None
    tracking.set_alias(settings, "cb", 1, "champion")
    opened = open_program(settings, load="models:/cb@champion", configure=False)
    model_id = mlflow.MlflowClient().get_model_version_by_alias("cb", "champion").source.removeprefix("models:/")
    assert model_id and tracing.enable_traces(settings, opened)["hqa.model_id"] == model_id
    with dspy.context(lm=DummyLM([{"answer": "Paris"}]), adapter=dspy.ChatAdapter()):
        assert opened.program(question="Capital of France?").answer == "Paris"
    (trace,) = traces_of(settings)
    assert trace.info.tags["hqa.model_uri"] == "models:/cb@champion" and trace.info.tags["hqa.model_id"] == model_id
    assert trace.info.request_metadata.get("mlflow.modelId") == model_id  # listed under the model in MLflow


def hqa(args: list[str], art: Path, **env) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "hqa.cli", *args], capture_output=True, text=True, cwd=str(art),
                          env=clean_env(PYTHONPATH=str(REPO), HQA_PATHS__ARTIFACTS=str(art), **env), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.server
def test_ask_traces_with_the_flag_or_the_config_key_only(tmp_path):
    server = _FakeOpenAI()
    lm = ["--program", "closedbook", "--lm", "openai_compatible", "--api-base", server.api_base, "--model", "x"]
    chat = {"HQA_LM__ADAPTER": "chat", "HQA_LM__RESPONSE_FORMAT": "none"}  # the server speaks DSPy's chat format only
    try:
        hqa(["ask", *lm, "Capital of France?"], tmp_path, **chat)
        hqa(["ask", *lm, "--trace", "Capital of Spain?"], tmp_path, **chat)
        hqa(["ask", *lm, "Capital of Peru?"], tmp_path, HQA_TRACKING__TRACES="true", **chat)
    finally:
        server.stop()
    traces = traces_of(settings_at(tmp_path))
    assert sorted(json.loads(t.info.request_preview)["question"] for t in traces) == ["Capital of Peru?",
                                                                                       "Capital of Spain?"]
    for trace in traces:
        assert trace.info.tags["hqa.program"] == "closedbook"
        assert [s for s in trace.data.spans if s.span_type == SpanType.CHAT_MODEL]


@pytest.mark.server
def test_hqa_evaluate_run_lists_every_question_with_its_scores(tmp_path):
    """With tracing on (``--trace``), ``hqa evaluate`` logs every question as an MLflow evaluation result scored by
    hqa's metrics; without it, none (the evaluation results are part of the tracing opt-in)."""
    server = _FakeOpenAI()  # answers "Paris" to everything
    lm = {"HQA_LM__PROVIDER": "openai_compatible", "HQA_LM__API_BASE": server.api_base, "HQA_LM__MODEL": "x",
          "HQA_LM__ADAPTER": "chat", "HQA_LM__RESPONSE_FORMAT": "none"}  # the server speaks DSPy's chat format only
    args = ["evaluate", "--program", "closedbook", "--dataset", "mintaka", "--limit", "2",
            "--out", str(tmp_path / "ev")]
    try:
        hqa(args, tmp_path, **lm)  # hqa() asserts the exit code
        assert traces_of(settings_at(tmp_path)) == []  # not asked for: no evaluation results, no traces
        proc = hqa([*args, "--fresh", "--trace"], tmp_path, **lm)
    finally:
        server.stop()
    # one LM call per question; the traced rerun's replies come from DSPy's cache and the MLflow evaluation asked none
    assert server.completions == 2
    assert proc.stdout.startswith("#") and "Evaluation completed" not in proc.stdout  # stdout is hqa's report
    rows = {r["id"]: r for r in map(json.loads, (tmp_path / "ev" / "predictions.jsonl").read_text().splitlines())}
    traces = [t for t in traces_of(settings_at(tmp_path)) if "hqa.id" in t.info.tags]  # the evaluation results
    assert sorted(t.info.tags["hqa.id"] for t in traces) == sorted(rows)
    for trace in traces:
        feedback = {a.name: a.value for a in trace.info.assessments if a.feedback is not None}
        assert feedback == {name: rows[trace.info.tags["hqa.id"]]["scores"][name] for name in GENAI_SCORERS}
    run = mlflow.get_run(traces[0].info.trace_metadata["mlflow.sourceRun"])
    assert run.info.run_name == "evaluate:closedbook:mintaka" and "em/mean" in run.data.metrics


def test_evaluation_rows_become_mlflow_evaluation_results(tmp_path):
    examples = [dspy.Example(id="q1", question="Capital of France?", answers=["Paris"], answer_ids=["Q90"],
                             dataset="t").with_inputs("question"),
                dspy.Example(id="q2", question="Capital of Gabon?", answers=["Libreville"], answer_ids=["Q3825"],
                             dataset="t").with_inputs("question"),
                dspy.Example(id="q3", question="Largest planet?", answers=["Jupiter"], answer_ids=[],
                             dataset="t").with_inputs("question")]
    lm = DummyLM([{"answer": "Paris"}, {"answer": "Libreville | Port-Gentil"}, {"answer": "Saturn"}])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        summary = evaluate(ClosedBook(), examples)
    settings = settings_at(tmp_path)
    assert [r["lm_calls"] for r in summary.rows] == [1, 1, 1]
    with dspy.context(lm=lm), tracking.run(settings, "evaluate:cb:t", autolog=False) as run:
        result = log_genai_evaluation(summary.rows)
    # logging asked the LM nothing: evaluate's questions keep no DSPy history (hqa.jobs.evaluate.run_one), a call
    # from logging would
    assert lm.history == []
    assert result.run_id == run.info.run_id
    traces = traces_of(settings)
    assert len(traces) == 3 and {t.info.trace_metadata.get("mlflow.sourceRun") for t in traces} == {run.info.run_id}
    rows = {r["id"]: r for r in summary.rows}
    for trace in traces:
        row = rows[trace.info.tags["hqa.id"]]
        feedback = {a.name: a.value for a in trace.info.assessments if a.feedback is not None}
        assert feedback == {name: row["scores"][name] for name in GENAI_SCORERS}
        expected = {a.name: a.value for a in trace.info.assessments if a.expectation is not None}
        assert expected == {"answers": row["gold"], "answer_ids": row["gold_ids"]}
    by_id = {t.info.tags["hqa.id"]: {a.name: a.value for a in t.info.assessments} for t in traces}
    # two answers for one gold: not an exact match, a hit at rank 1, full recall, QALD F1 2/3
    assert [by_id["q2"][m] for m in ("em", "hits1", "recall", "qald_f1")] == [0.0, 1.0, 1.0, 0.6667]
    assert by_id["q1"]["em"] == 1.0 and by_id["q3"]["recall"] == 0.0
    assert result.metrics["em/mean"] == pytest.approx(1 / 3) and result.metrics["hits1/mean"] == pytest.approx(2 / 3)
