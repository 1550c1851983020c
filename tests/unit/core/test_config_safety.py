"""`hqa config set/reset` keep hqa.toml valid, commented, mode-preserved and symlinked; every setting is range-checked."""

from __future__ import annotations

import math
import os
import stat
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hqa.config import load_settings, reset_value, set_value
from hqa.errors import ConfigError

COMMENTED = "# my settings\n[lm]\n# which model\nmodel = \"m\"  # inline note\n\n[kg]\ntimeout = 5.0\n"


@pytest.mark.parametrize("value", ["x\ny", "a\x07b", "tab\there", "del\x7f", "\r"])
def test_set_refuses_control_characters_and_leaves_the_file(tmp_path, value):
    cfg = tmp_path / "hqa.toml"
    cfg.write_text(COMMENTED)
    with pytest.raises(ConfigError, match="control character"):
        set_value("lm.model", value, cfg)
    assert cfg.read_text() == COMMENTED


@settings(max_examples=80, deadline=None)
@given(st.text(st.characters(min_codepoint=32, exclude_categories=("Cs",)).filter(lambda c: c != "\x7f"), max_size=40))
def test_any_printable_string_round_trips_through_toml(tmp_path_factory, value):
    cfg = tmp_path_factory.mktemp("c") / "hqa.toml"
    cfg.write_text(COMMENTED)
    set_value("lm.model", value, cfg)
    assert tomllib.loads(cfg.read_text())["lm"]["model"] == value
    assert load_settings(cfg, environ={}).lm.model == value


def test_set_keeps_comments_mode_and_symlink(tmp_path):
    real = tmp_path / "real.toml"
    real.write_text(COMMENTED)
    os.chmod(real, 0o644)
    link = tmp_path / "hqa.toml"
    link.symlink_to(real)
    set_value("lm.temperature", "0.5", link)
    set_value("tracking.experiment", "exp", link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    text = real.read_text()
    for comment in ("# my settings", "# which model", "# inline note"):
        assert comment in text
    assert stat.S_IMODE(real.stat().st_mode) == 0o644
    data = tomllib.loads(text)
    assert data["lm"] == {"model": "m", "temperature": 0.5} and data["tracking"] == {"experiment": "exp"}


@pytest.mark.parametrize("key,value,needle", [
    ("lm.temperature", "7", "lm.temperature must be between 0 and 2"),
    ("lm.temperature", "99", "lm.temperature"),
    ("lm.temperature", "nan", "finite"),
    ("lm.num_retries", "-1", "lm.num_retries must be between 0 and 20"),
    ("kg.timeout", "inf", "kg.timeout must be a finite number"),
    ("kg.timeout", "0", "kg.timeout must be positive"),
    ("lm.timeout", "-3", "lm.timeout must be positive"),
    ("kg.memory_mb", "1", "kg.memory_mb"),
    ("lm.max_tokens", "²", "expected int"),
    ("kg.endpoint", "not-a-url", "not an http(s) URL"),
    ("lm.nope", "1", "unknown config key lm.nope"),
])
def test_set_refuses_out_of_range_values(tmp_path, key, value, needle):
    cfg = tmp_path / "hqa.toml"
    cfg.write_text(COMMENTED)
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        set_value(key, value, cfg)
    assert cfg.read_text() == COMMENTED


@pytest.mark.parametrize("env", [
    {"HQA_LM__TEMPERATURE": "7"}, {"HQA_LM__NUM_RETRIES": "-1"}, {"HQA_KG__TIMEOUT": "inf"},
    {"HQA_KG__ENDPOINT": "not-a-url"}, {"HQA_LM__MODEL": "a\nb"}, {"HQA_TRACKING__URI": "http://"},
])
def test_load_time_ranges(env):
    with pytest.raises(ConfigError):
        load_settings(Path("/nonexistent-hqa.toml"), environ=env)


@settings(max_examples=60, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_temperature_is_accepted_exactly_in_range(t):
    ok = math.isfinite(t) and 0.0 <= t <= 2.0
    try:
        load_settings(Path("/nonexistent-hqa.toml"), environ={"HQA_LM__TEMPERATURE": repr(t)})
    except ConfigError:
        assert not ok
    else:
        assert ok


def test_out_of_range_value_in_the_file_is_repaired_by_set_or_reset_of_that_key(tmp_path):
    cfg = tmp_path / "hqa.toml"
    cfg.write_text("# keep me\n[lm]\ntemperature = 7.0\nnum_retries = -1\n")
    with pytest.raises(ConfigError, match="lm.temperature"):
        load_settings(cfg, environ={})
    with pytest.raises(ConfigError, match="lm.num_retries"):  # the other bad key still blocks a full-file check
        set_value("lm.temperature", "0.3", cfg)
    reset_value("lm.num_retries", cfg)
    set_value("lm.temperature", "0.3", cfg)
    assert load_settings(cfg, environ={}).lm.temperature == 0.3
    assert "# keep me" in cfg.read_text()
