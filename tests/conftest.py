"""Shared fixtures: a knowledge pack built once per session from the real recorded data, into a temp dir."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def built_pack(tmp_path_factory) -> Path:
    """A real pack (artifacts layout) built from ../shared/data into a session temp dir."""
    from hqa.data.pack import build_pack

    artifacts = tmp_path_factory.mktemp("artifacts")
    build_pack(artifacts / "pack")
    return artifacts


@pytest.fixture()
def settings_for(built_pack):
    """Settings pointing at the session pack; keyword overrides as ``section_key=value``."""
    from hqa.config import load_settings

    def make(**overrides):
        return load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(built_pack), **overrides)

    return make
