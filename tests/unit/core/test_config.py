from pathlib import Path

import pytest

from hqa.config import Settings, env_updates, load_settings, set_value
from hqa.errors import ConfigError

NOFILE = Path("/nonexistent-hqa.toml")


def test_defaults_are_embedded():
    s = load_settings(NOFILE, environ={})
    assert s.lm.provider == "local" and s.kg.kind == "oxigraph" and s.text.kind == "pack"
    assert s.tracking_uri.startswith("sqlite:///") and s.tracking_uri.endswith("mlflow.db")


def test_file_then_env_precedence(tmp_path):
    cfg = tmp_path / "hqa.toml"
    cfg.write_text('[lm]\nprovider = "openai"\nmodel = "gpt-4o-mini"\n[kg]\nlimit = 7\n')
    s = load_settings(cfg, environ={"HQA_KG__LIMIT": "9"})
    assert (s.lm.provider, s.lm.model, s.kg.limit) == ("openai", "gpt-4o-mini", 9)


@pytest.mark.parametrize(
    "text,needle",
    [
        ("[lm]\nprovdier = 'local'\n", "unknown config key lm.provdier"),
        ("[llm]\nprovider = 'local'\n", "unknown config section 'llm'"),
        ("[kg]\nlimit = 'many'\n", "kg.limit"),
        ("[kg]\nkind = 'sparql'\nendpoint = 'not a url'\n", "not an http(s) URL"),
        ("[kg]\nkind = 'sparql'\n", "kg.endpoint is required"),
        ("[lm]\nprovider = 'openai_compatible'\nmodel = 'm'\n", "lm.api_base is required"),
        ("[lm]\nprovider = 'bard'\n", "lm.provider"),
        ("[tracking]\nuri = 'file:///tmp/mlruns'\n", "file store"),
        ("[lm\n", "not valid TOML"),
    ],
)
def test_bad_config_rejected_with_clear_message(tmp_path, text, needle):
    cfg = tmp_path / "hqa.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg, environ={})
    assert needle in str(err.value)


def test_env_var_names():
    assert env_updates({"HQA_LM__MODEL": "x", "HQA_OTHER": "y", "PATH": "/bin"}) == {"lm": {"model": "x"}}
    with pytest.raises(ConfigError):
        load_settings(NOFILE, environ={"HQA_LM__NOPE": "1"})


def test_set_value_validates_and_writes_atomically(tmp_path):
    cfg = tmp_path / "hqa.toml"
    set_value("kg.limit", "25", cfg)
    set_value("lm.api_base", "http://127.0.0.1:8000/v1", cfg)
    assert load_settings(cfg, environ={}).kg.limit == 25
    before = cfg.read_text()
    with pytest.raises(ConfigError):
        set_value("kg.limit", "lots", cfg)
    with pytest.raises(ConfigError):
        set_value("kg.bogus", "1", cfg)
    assert cfg.read_text() == before  # a rejected change leaves the file as it was
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".hqa.toml.")]  # no temp files left


def test_derived_paths(tmp_path):
    s = Settings()
    s.paths.artifacts = str(tmp_path)
    assert s.pack_dir == tmp_path / "pack" and s.kg_path == tmp_path / "pack" / "kg"
