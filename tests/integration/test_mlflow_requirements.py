"""The logged MLflow model of a compiled program is installable in a fresh environment: hqa travels as code_paths,
the requirements pin every runtime dependency (dspy and mlflow included) at the logging environment's versions, an
input example is stored, and ``predict`` takes the program's runtime options as ``params``."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import dspy
import mlflow
import pytest
from dspy.utils import DummyLM

from hqa.app import open_program
from hqa.errors import ConfigError
from hqa.optimize import mlflow_model
from hqa.tracking import registry as tracking
from hqa.artifacts.store import save_artifact
from hqa.programs.simple import SimpleHybrid

Q = "Who is the author of Animal Farm?"


@pytest.fixture(scope="module")
def logged(built_pack, tmp_path_factory):
    from hqa.config import load_settings

    art = tmp_path_factory.mktemp("mlflow-req")
    settings = load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(built_pack))
    settings.tracking.uri = f"sqlite:///{art / 'mlflow.db'}"
    program = SimpleHybrid()
    dest = save_artifact(program, art / "programs" / "simple-x", {"program": "simple", "program_kwargs": {}})
    with tracking.run(settings, "compile:simple-x") as run:
        assert mlflow_model.log_program(dest, settings=settings) is None
    uri = mlflow.get_run(run.info.run_id).data.tags["model_uri"]
    return settings, uri, Path(mlflow.artifacts.download_artifacts(uri))


def test_requirements_pin_dspy_mlflow_and_every_runtime_dependency(logged):
    _settings, _uri, local = logged
    reqs = [line.strip() for line in (local / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert f"dspy=={metadata.version('dspy')}" in reqs and f"mlflow=={metadata.version('mlflow')}" in reqs
    from packaging.requirements import Requirement

    runtime = {Requirement(r).name for r in metadata.requires("hqa") if "extra" not in r}
    pinned = {Requirement(r).name: r for r in reqs}
    assert runtime <= set(pinned), runtime - set(pinned)
    assert all("==" in pinned[name] for name in runtime)
    # hqa itself travels with the model, importable from its code folder
    code = local / "code" / "hqa"
    assert (code / "__init__.py").is_file() and (code / "serve" / "page.html").is_file()
    assert "code: code" in (local / "MLmodel").read_text()


def test_input_example_and_params_in_the_signature(logged):
    _settings, uri, local = logged
    info = mlflow.models.get_model_info(uri)
    params = {p.name: p for p in info.signature.params.params}
    assert params["k"].dtype.name == "long" and params["k"].default == SimpleHybrid().k
    assert params["answer_mode"].dtype.name == "string"
    example = json.loads((local / "input_example.json").read_text())
    assert Q in json.dumps(example)


def test_predict_applies_params_for_that_call_only(logged):
    """``params={"k": 1}`` gives one evidence item; the next call without params uses the compiled k."""
    import pandas as pd

    from hqa.pyfunc import HQAModel

    settings, _uri, local = logged
    model = HQAModel()
    model.opened = open_program(settings, load=local / "artifacts" / "simple-x", configure=False)
    lm = DummyLM({"Animal Farm": {"answer": "George Orwell"}})
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        one = model.predict(None, pd.DataFrame({"question": [Q]}), params={"k": 1, "choices": None})
        default = model.predict(None, {"question": [Q]})
        with pytest.raises(ConfigError, match="'k' must be between 1 and 50"):
            model.predict(None, {"question": [Q]}, params={"k": 0})
    assert len(json.loads(one["trace"][0])["evidence"]) == 1
    assert len(json.loads(default["trace"][0])["evidence"]) == SimpleHybrid().k
