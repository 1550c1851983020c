"""Bounds under hostile input (issue 40) that need no server: range messages, unreadable rows, a remote KG down
at start-up, deep SPARQL and a swallowed stop (the served and CLI cases are in tests/integration/test_hostile_input.py)."""

from __future__ import annotations

import json

import pytest
from standins.servers import free_port


def test_range_messages_write_bounds_as_numbers(tmp_path):
    from hqa.config import load_settings
    from hqa.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        load_settings(tmp_path / "none.toml", environ={"HQA_KG__MEMORY_MB": "9999999"})
    assert "between 64 and 1048576" in str(err.value) and "e+" not in str(err.value)


def test_non_utf8_prediction_rows_are_named_in_one_warning(tmp_path, caplog):
    import logging

    from hqa.schemas.run_folder import read_rows

    row = {"id": "q1", "question": "Q?", "answer": "caf\u00e9", "gold": ["A"], "gold_ids": [], "dataset": "mintaka",
           "trace": {"program": "closedbook"}, "error": None, "prompt_tokens": 1, "completion_tokens": 1,
           "tool_calls": 0, "lm_calls": 1, "seconds": 0.1, "scores": {"em": 0.0, "f1": 0.0, "recall": 0.0,
                                                                        "hits1": 0.0}}
    raw = json.dumps(row, ensure_ascii=False).encode().replace("\u00e9".encode(), b"\xe9")
    path = tmp_path / "predictions.jsonl"
    path.write_bytes(raw + b"\n" + b"{cut short\n")
    with caplog.at_level(logging.WARNING):
        read_rows(path)
        rows = read_rows(path)  # a resumed run reads its file again
    texts = [r.getMessage() for r in caplog.records]
    assert rows[0]["answer"] == "caf\ufffd"
    assert sum("not UTF-8 on line 1" in t for t in texts) == 1
    assert sum("1 unreadable line skipped: line 2" in t for t in texts) == 1


def test_a_remote_kg_down_at_start_up_is_one_warning_and_every_source_program_still_opens(tmp_path):
    """Decided per program (docs/security.md): every program that reads sources also reads text and answers with
    the KG's failures as observations (tests/integration/test_outage_programs.py), so a remote SPARQL endpoint that does not
    answer at start-up is a warning for each of them, not an exit before answering; a missing local store stays an
    error."""
    from hqa.app import open_program
    from hqa.config import load_settings
    from hqa.errors import HQAError

    passages = tmp_path / "passages.jsonl"
    passages.write_text(json.dumps({"id": "p1", "title": "Animal Farm", "text": "A novella by George Orwell."}) + "\n")
    dead = f"http://127.0.0.1:{free_port()}/sparql"  # nothing listens there
    settings = load_settings(tmp_path / "none.toml", environ={}, kg_kind="sparql", kg_endpoint=dead,
                             text_kind="jsonl", text_path=str(passages), linker_kind="sparql",
                             http_cache_mode="off", kg_timeout=5.0, http_backoff_base=0.01)  # retried, briefly
    for program in ("simple", "humaniq", "static", "latefusion", "detllm", "sscot"):
        opened = open_program(settings, program=program, configure=False)
        assert [w for w in opened.warnings if "is not usable" in w and "other sources" in w], (program,
                                                                                              opened.warnings)
    local = load_settings(tmp_path / "none.toml", environ={}, kg_kind="oxigraph", kg_path=str(tmp_path / "no-kg"),
                          text_kind="jsonl", text_path=str(passages), linker_kind="sparql",
                          paths_artifacts=str(tmp_path / "artifacts"))
    with pytest.raises(HQAError):
        open_program(local, program="simple", configure=False)


def test_deep_valid_sparql_parses_and_a_slow_parse_counts_against_the_query_timeout(tmp_path):
    import pyoxigraph as ox

    from hqa.retrievers.sparql.guard import prepare_query
    from hqa.retrievers.sparql.backends import OxigraphSparql

    patterns = "SELECT ?x WHERE { " + " ".join(f"?x wdt:P{i} ?v{i} ." for i in range(84)) + " }"
    nested = "SELECT ?x WHERE { ?x wdt:P31 ?y }"
    for _ in range(24):
        nested = f"SELECT ?x WHERE {{ {{ {nested} }} }}"
    assert prepare_query(patterns)[0] == prepare_query(nested)[0] == "SELECT"  # were "RecursionError"
    store = ox.Store(str(tmp_path / "kg"))
    store.add(ox.Quad(ox.NamedNode("http://www.wikidata.org/entity/Q1"),
                      ox.NamedNode("http://www.wikidata.org/prop/direct/P31"),
                      ox.NamedNode("http://www.wikidata.org/entity/Q5")))
    store.flush()
    del store
    kg = OxigraphSparql(tmp_path / "kg", timeout=1.0)
    try:
        # the probe of issue 40: a FILTER of ~1,400 `||` terms inside the 20,000-character cap (seconds to parse)
        slow = "SELECT ?x WHERE { ?x wdt:P31 ?y FILTER(" + " || ".join(f"?y=wd:Q{i}" for i in range(1400)) + ") }"
        from hqa.retrievers.sparql import guard as sparql

        stopped = sparql._PARSER.stopped
        result = kg.run(slow)
        assert result.error == "SPARQL query took over 1s to parse (kg.timeout); refused"
    finally:
        kg.close()
    # the next query is parsed after it (one parser thread), with time to spare on a loaded machine: by then the slow
    # parse was stopped, not left to run to its end
    patient = OxigraphSparql(tmp_path / "kg", timeout=120.0)
    try:
        answered = patient.run("SELECT ?c WHERE { wd:Q1 wdt:P31 ?c }")
    finally:
        patient.close()
    assert answered.error is None and answered.rows, answered.error
    assert sparql._PARSER.stopped == stopped + 1


def test_a_stop_swallowed_by_a_callback_is_sent_again_until_the_parse_ends():
    # seen in CI: the stop landed while the parser thread ran hypothesis's gc callback, which swallowed it
    # ("Exception ignored in ... gc_callback"), and the slow parse ran to its end
    from hqa.retrievers.sparql import guard as sparql

    swallowed = []

    def stubborn():
        try:
            while True:
                pass
        except sparql._StopParse:
            swallowed.append(1)  # as a gc callback does: the parse goes on
        while True:
            pass

    parser = sparql._Parser()
    with pytest.raises(sparql.ParseTimeout):
        parser.run(stubborn, 0.2)
    assert swallowed == [1] and parser.stopped == 1  # the second stop ended it
    assert parser.run(lambda: 42, 60.0) == 42  # the thread is free for the next query
