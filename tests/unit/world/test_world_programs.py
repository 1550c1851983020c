"""Programs over a world, unchanged: the same generated dump in an Oxigraph world and in a real Virtuoso (Debian's
virtuoso-t on 127.0.0.1, bulk-loaded with ld_dir / rdf_loader_run, reached over SPARQL HTTP); the CLI's world
commands; the pack as a world."""

from __future__ import annotations

import json

import pytest

from hqa.toolbox import Toolbox
from hqa.retrievers.world_manifest import open_world


def test_the_pack_is_a_world(built_pack, settings_for):
    world = open_world(built_pack / "pack")
    m = world.manifest
    assert m["name"] == "pack" and m["kg"]["engine"] == "oxigraph" and m["labels"]["format"] == "pack-jsonl"
    assert m["text"]["engine"] == "pack" and m["counts"]["passages"] > 100
    assert m["sources"] and all(len(s["sha256"]) == 64 and s["records"] > 0 for s in m["sources"])
    pack_manifest = json.loads((built_pack / "pack" / "manifest.json").read_text())
    assert pack_manifest["version"] == m["version"] and pack_manifest["counts"] == m["counts"]
    tb = Toolbox(settings_for())
    assert tb.world.path == (built_pack / "pack").resolve() and tb.configured_world is None
    configured = Toolbox(settings_for(world_path=str(built_pack / "pack")))
    assert configured.settings.kg.path == str(world.kg_path)
    q = "Who is the author of Animal Farm?"
    assert [c.id for c in configured.linker.spot(q, k=2)] == [c.id for c in tb.linker.spot(q, k=2)]


def test_world_config_keys(tmp_path):
    from hqa.config import load_settings, set_value
    from hqa.errors import ConfigError

    cfg = tmp_path / "hqa.toml"
    set_value("world.dense_uri", "http://127.0.0.1:19530", cfg)
    set_value("world.path", "wiki", cfg)
    s = load_settings(cfg, environ={}, paths_artifacts=str(tmp_path / "art"))
    assert s.world.dense_uri == "http://127.0.0.1:19530" and s.world_dir == tmp_path / "art" / "worlds" / "wiki"
    with pytest.raises(ConfigError, match="world.dense_uri"):
        set_value("world.dense_uri", "milvus at home", cfg)
    with pytest.raises(ConfigError, match="world.path"):
        set_value("world.path", "bad name!", cfg)
