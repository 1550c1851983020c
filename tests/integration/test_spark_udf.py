"""MLflow's batch convention (issue 55): ``mlflow.pyfunc.spark_udf`` over a registered hqa model scores a Spark
DataFrame of questions in Spark local mode (the session's ``spark`` fixture, ``local[2]``; ``env_manager="local"``)
with the answers ``predict`` gives in one process.  The model is code plus the compiled program's JSON (no pickle);
each Spark Python worker loads it through ``hqa.pyfunc`` and is given its LM — the loopback stand-in — through the
loader's ``model_config`` (``{"settings": {"lm": ...}}``), not its environment."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest

QUESTIONS = ["What is the capital of Gabon?", "Who wrote Animal Farm?", "Where is Lima?", "Spell Oslo?",
             "Which river flows through Cairo?", "Who painted the Mona Lisa?"]


@pytest.fixture(scope="module")
def registered(tmp_path_factory, entity_lm):
    """A closed-book program saved, logged and registered as ``hqa-spark`` version 1; the loader's LM settings."""
    from hqa.artifacts.store import save_artifact
    from hqa.config import load_settings
    from hqa.optimize import mlflow_model
    from hqa.programs.closedbook import ClosedBook
    from hqa.tracking import registry as tracking

    art = tmp_path_factory.mktemp("spark-art")
    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(art))
    dest = save_artifact(ClosedBook(), art / "programs" / "cb", {"program": "closedbook", "program_kwargs": {}})
    with tracking.run(settings, "compile:cb"):
        assert mlflow_model.log_program(dest, settings=settings, register="hqa-spark") is None
    config = {"settings": {"lm": {"provider": "openai_compatible", "api_base": entity_lm.api_base, "model": "standin",
                                  "cache": False}}}
    return "models:/hqa-spark/1", config


def test_spark_udf_rows_equal_predict(spark, registered):
    uri, config = registered
    local = Path(mlflow.artifacts.download_artifacts(uri))
    assert not [p for p in local.rglob("*") if p.suffix in (".pkl", ".pickle", ".cloudpickle")]  # code + JSON only
    score = mlflow.pyfunc.spark_udf(spark, uri, env_manager="local", model_config=config)
    frame = spark.createDataFrame([(q,) for q in QUESTIONS], ["question"]).repartition(2)
    scored = frame.withColumn("pred", score("question")).select("question", "pred.answer", "pred.trace").collect()

    expected = mlflow.pyfunc.load_model(uri, model_config=config).predict({"question": QUESTIONS})
    want = dict(zip(expected["question"], expected["answer"]))
    got = {row["question"]: row["answer"] for row in scored}
    assert got == want and len(got) == len(QUESTIONS)
    assert len(set(got.values())) > 1  # the stand-in answers each question's own entity: a mix-up would show
    for row in scored:
        trace = json.loads(row["trace"])
        assert trace["program"] == "closedbook" and trace["question"] == row["question"]
