"""What ``--engine`` builds (hqa.jobs.engine.make_engine), a question's program recipe (ProgramSpec) and the Ray
engine's LM-request desk, without starting Ray (tests/integration/test_ray_engine.py runs the engine itself)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from hqa.config import load_settings
from hqa.errors import ConfigError
from hqa.jobs.engine import ProgramSpec, ThreadsEngine, make_engine

NOFILE = Path("/nonexistent-hqa.toml")


def test_threads_is_the_default_and_ray_options_go_with_ray(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    engine = make_engine(threads=3)
    assert isinstance(engine, ThreadsEngine) and engine.threads == 3 and not engine.remote
    with pytest.raises(ConfigError, match="go with --engine ray"):
        make_engine("threads", workers=2)
    with pytest.raises(ConfigError, match="go with --engine ray"):
        make_engine("threads", address="ray://head:10001")
    with pytest.raises(ConfigError, match="unknown engine 'spark'"):
        make_engine("spark")


def test_the_ray_engine_is_made_without_starting_ray(monkeypatch):
    from hqa.jobs.ray_engine import RayEngine

    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    engine = make_engine("ray", threads=64, workers=4)
    assert isinstance(engine, RayEngine) and engine.remote and engine.address == "head:6379"
    assert engine.workers == 4 and engine.threads == 64 and not engine.slots
    with pytest.raises(ConfigError, match="--workers must be at least 1"):
        RayEngine(workers=0)


def test_a_recipe_is_plain_data_with_an_absolute_world(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = load_settings(NOFILE, environ={}, paths_artifacts="art", lm_model="m")
    spec = ProgramSpec.of(settings, program="simple", program_kwargs={"k": 3}, benchmark="compmix/test")
    assert spec.settings["paths"]["artifacts"] == str(tmp_path / "art")
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert spec.key == ProgramSpec.of(settings, program="simple", program_kwargs={"k": 3},
                                      benchmark="compmix/test").key
    assert spec.key != ProgramSpec.of(settings, program="simple", program_kwargs={"k": 4}).key
    loaded = ProgramSpec.of(settings, load="programs/p")
    assert loaded.load == str(tmp_path / "programs" / "p")
    assert ProgramSpec.of(settings, load="models:/hqa@champion").load == "models:/hqa@champion"


def test_the_desk_grants_what_is_left_and_nothing_once_closed():
    from hqa.jobs.ray_engine import Desk

    desk = Desk(left=2)
    assert desk.open() and desk.request() and desk.request()
    assert not desk.request() and not desk.open() and desk.granted() == 2
    unlimited = Desk(left=None)
    assert all(unlimited.request() for _ in range(100))
    unlimited.close()
    assert not unlimited.request() and not unlimited.open() and unlimited.granted() == 100
