"""Every program over live sources — Wikipedia (MediaWiki Action API), Wikidata (Wikibase API) and a SPARQL endpoint
— recorded through the HTTP cache, then replayed with every server stopped: identical traces, zero requests.

The loopback services (:mod:`standins.live`) speak the real MediaWiki, Wikibase and SPARQL response formats, backed
by the test knowledge pack; the SPARQL side is a real ``oxigraph serve-read-only`` behind a logging pass-through.
"""

from __future__ import annotations


import pytest


def test_sources_switch_sets_all_three_and_bad_combinations_fail(tmp_path, monkeypatch):
    from hqa.config import ConfigError, load_settings, set_value

    path = tmp_path / "hqa.toml"
    set_value("sources", "live", path)
    s = load_settings(path, environ={})
    assert (s.text.kind, s.linker.kind, s.kg.kind, s.kg.endpoint) == (
        "wikipedia", "wikidata", "sparql", "https://query.wikidata.org/sparql")
    assert s.text.api == "https://en.wikipedia.org/w/api.php" and s.linker.api == "https://www.wikidata.org/w/api.php"
    set_value("sources", "offline", path)  # the endpoint `live` wrote goes with it (issue 53)
    assert "endpoint" not in path.read_text() and load_settings(path, environ={}).kg.endpoint == ""
    set_value("sources", "live", path)
    set_value("kg.endpoint", "http://127.0.0.1:7878/query", path)
    set_value("sources", "offline", path)
    set_value("sources", "live", path)  # the user's own endpoint survives the switch
    assert load_settings(path, environ={}).kg.endpoint == "http://127.0.0.1:7878/query"
    before = path.read_text()
    for key, value, needle in [("sources", "online", "one of live, offline"),
                               ("text.kind", "pack", "mixes the offline pack"),
                               ("linker.kind", "dbpedia", "linker.kind"),
                               ("text.endpoint", "ftp://x", r"not an http\(s\) URL"),
                               ("linker.language", "EN GB", "language code")]:
        with pytest.raises(ConfigError, match=needle):
            set_value(key, value, path)
        assert path.read_text() == before  # nothing written
