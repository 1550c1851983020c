"""Programs over a world, unchanged: the same generated dump in an Oxigraph world and in a real Virtuoso (Debian's
virtuoso-t on 127.0.0.1, bulk-loaded with ld_dir / rdf_loader_run, reached over SPARQL HTTP); the CLI's world
commands; the pack as a world."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import dspy
import pytest
from conftest import DemoSensitiveLM, KeepOrderReranker
from dspy.utils import DummyLM
from worldkit import build, store_triples, write_dumps

from hqa.cli.entry import main
from hqa.errors import WorldError
from hqa.programs import build_program
from hqa.programs.humaniq import HumanIQAgent
from hqa.programs.humaniq_tools import AgentTools
from hqa.toolbox import Toolbox
from hqa.retrievers.world_manifest import open_world
from standins.virtuoso import VirtuosoServer

WD = "http://www.wikidata.org/entity/"
WDT = "http://www.wikidata.org/prop/direct/"


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dumps")
    write_dumps(out, kinds=("nt.gz", "json.gz"))
    return out


@pytest.fixture(scope="module")
def ox_world(dumps, tmp_path_factory) -> Path:
    world = tmp_path_factory.mktemp("worlds") / "ox"
    build(world, str(dumps / "truthy.nt.gz"))
    return world


@pytest.fixture(scope="module")
def virtuoso(tmp_path_factory):
    """A Virtuoso server of its own (free ports, its own virtuoso.ini, DirsAllowed = its load folder), stopped at the
    end with nothing left running."""
    root = tmp_path_factory.mktemp("virtuoso")
    server = VirtuosoServer(root / "db", root / "load", memory_mb=128).start()
    try:
        yield server
    finally:
        server.stop()
        assert server.proc.poll() is not None, "virtuoso-t still running"


@pytest.fixture(scope="module")
def virt_world(dumps, virtuoso, tmp_path_factory) -> Path:
    world = tmp_path_factory.mktemp("worlds") / "virt"
    code = main(["world", "build", "virt", "--wikidata", str(dumps / "entities.json.gz"), "--kg-engine", "virtuoso",
                 "--virtuoso-endpoint", virtuoso.endpoint, "--virtuoso-isql", f"127.0.0.1:{virtuoso.sql_port}",
                 "--virtuoso-load-dir", str(virtuoso.dump_dir), "--out", str(world), "--quiet"])
    assert code == 0
    return world


def subject(world: Path) -> tuple[str, str, set[tuple[str, str]]]:
    """A labelled item with 3-20 statements: (QID, label, {(property IRI, object value)})."""
    triples = store_triples(world / "kg")
    db = sqlite3.connect(str(world / "labels.sqlite"))
    for qid, label in db.execute("SELECT id, label FROM entities WHERE id LIKE 'Q%' AND label IS NOT NULL "
                                 "ORDER BY degree DESC, id"):
        rows = {(p, o) for s, p, o in triples if s == WD + qid and p.startswith(WDT)}
        if 3 <= len(rows) <= 20 and len(label.split()) >= 2:
            return qid, label, rows
    raise AssertionError("no suitable entity in the generated world")


def plain(value: str) -> str:
    """An N-Triples object as the SPARQL JSON value (IRIs and literals' lexical forms)."""
    if value.startswith("<"):
        return value[1:-1]
    return json.loads(value[: value.rindex('"') + 1])


def settings_for_world(world: Path, **kw):
    from hqa.config import load_settings

    return load_settings(Path("/nonexistent-hqa.toml"), environ={}, world_path=str(world),
                         programs_answer_mode="free", **kw)


def test_virtuoso_world_holds_the_same_triples(ox_world, virt_world, virtuoso):
    m = open_world(virt_world).manifest
    assert m["kg"]["engine"] == "virtuoso" and m["kg"]["endpoint"] == virtuoso.endpoint
    assert m["kg"]["triples"] == m["kg"]["triples_in_graph"] == len(store_triples(ox_world / "kg"))
    assert not (virt_world / "kg").exists() and (virt_world / "labels.sqlite").is_file()
    tb = Toolbox(settings_for_world(virt_world))
    assert tb.settings.kg.kind == "sparql" and tb.settings.kg.endpoint == virtuoso.endpoint
    qid, _label, rows = subject(ox_world)
    res = tb.sparql.run(f"SELECT ?p ?o WHERE {{ wd:{qid} ?p ?o . FILTER(STRSTARTS(STR(?p), STR(wdt:))) }}")
    assert res.ok, res.error
    assert {(r["p"], r["o"]) for r in res.rows} == {(p, plain(o)) for p, o in rows}


@pytest.mark.parametrize("engine", ["oxigraph", "virtuoso"])
def test_simple_program_runs_unchanged(engine, ox_world, request):
    world = ox_world if engine == "oxigraph" else request.getfixturevalue("virt_world")
    qid, label, rows = subject(ox_world)
    world_simple_tb = Toolbox(settings_for_world(world), reranker=KeepOrderReranker())
    program = build_program("simple", toolbox=world_simple_tb)
    with dspy.context(lm=DemoSensitiveLM(), adapter=dspy.ChatAdapter()):
        pred = program(question=f"Where was {label} born?")
    trace = pred.trace
    assert trace["entities"][0]["id"] == qid
    hop = [q for q in trace["sparql"] if f"wd:{qid} ?p ?o" in q["query"]]
    assert hop and hop[0]["error"] is None
    assert {(r["p"], r["o"]) for r in hop[0]["rows"]} == {(p, plain(o)) for p, o in rows}
    assert trace["source_errors"]["text"].endswith("has no passages")


@pytest.mark.parametrize("engine", ["oxigraph", "virtuoso"])
def test_humaniq_agent_runs_unchanged(engine, ox_world, request):
    world = ox_world if engine == "oxigraph" else request.getfixturevalue("virt_world")
    qid, label, rows = subject(ox_world)
    pid = sorted(rows)[0][0].rsplit("/", 1)[-1]
    want = sorted(plain(o) for p, o in rows if p.endswith("/" + pid))
    world_agent_tb = Toolbox(settings_for_world(world), reranker=KeepOrderReranker())
    answers = [
        {"next_thought": "find it", "next_tool_name": "GetWikidataID", "next_tool_args": label},
        {"next_thought": "query", "next_tool_name": "RunSparql",
         "next_tool_args": f"SELECT ?x WHERE {{ wd:{qid} wdt:{pid} ?x }}"},
        {"next_thought": "done", "next_tool_name": "Finish", "next_tool_args": "Wikidata_Answer: [x]"},
        {"answer": "x"}, {"answer": "x"},
    ]
    with dspy.context(lm=DummyLM(answers), adapter=dspy.ChatAdapter()):
        pred = HumanIQAgent(toolbox=world_agent_tb)(question=f"What is the {pid} of {label}?")
    trace = pred.trace
    obs = {c["tool"]: c["output"] for c in trace["tool_calls"]}
    assert obs["GetWikidataID"].startswith(f"['{qid}'")
    assert sorted(r["x"] for r in trace["sparql"][0]["rows"]) == want


def test_cli_world_commands(dumps, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HQA_PATHS__ARTIFACTS", str(tmp_path / "art"))
    monkeypatch.setenv("HQA_CONFIG", str(tmp_path / "hqa.toml"))
    (tmp_path / "hqa.toml").write_text("")
    assert main(["world", "build", "tiny", "--wikidata", str(dumps / "truthy.nt.gz") + ":nt", "--properties",
                 "P31,P17", "--quiet"]) == 0
    assert main(["world", "list"]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "kg=oxigraph" in out
    assert main(["world", "use", "tiny"]) == 0
    assert 'path = "tiny"' in (tmp_path / "hqa.toml").read_text()
    capsys.readouterr()
    assert main(["config", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["world"]["path"] == "tiny" and shown["derived"]["world_dir"].endswith("/worlds/tiny")
    assert main(["world", "show", "tiny"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    assert manifest["kg"]["filter"]["properties"] == ["P17", "P31"] and manifest["complete"] is True
    assert main(["world", "remove", "tiny"]) == 2  # the configured world is not removed
    assert "is the configured world" in capsys.readouterr().err
    assert main(["config", "reset", "world.path"]) == 0
    assert main(["world", "remove", "tiny"]) == 0
    assert not (tmp_path / "art" / "worlds" / "tiny").exists()
    assert main(["world", "use", "tiny"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["world", "build", "bad/name", "--wikidata", str(dumps / "truthy.nt.gz")]) == 2
    assert main(["world", "build", "x", "--kg-engine", "virtuoso", "--wikidata", str(dumps / "truthy.nt.gz")]) == 2
    assert "--virtuoso-endpoint" in capsys.readouterr().err


def test_a_configured_world_that_is_incomplete_stops_the_program_with_one_line(dumps, tmp_path, monkeypatch):
    from hqa.world import kg as K

    monkeypatch.setattr(K.OxigraphLoader, "load", lambda self, chunk: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        build(tmp_path / "half", str(dumps / "truthy.nt.gz"))
    with pytest.raises(WorldError, match="is incomplete .*resume"):
        Toolbox(settings_for_world(tmp_path / "half"))


def test_kg_labels_come_from_the_label_store_without_a_query(ox_world, monkeypatch):
    tb = Toolbox(settings_for_world(ox_world))
    qid, label, _rows = subject(ox_world)
    ran = []
    monkeypatch.setattr(tb.sparql.backend, "run", lambda q: ran.append(q))
    assert tb.sparql.labels([qid, "P31"]) == {qid: label, "P31": "instance of"}
    assert ran == []


def test_a_world_pointing_at_an_endpoint(dumps, ox_world, tmp_path):
    """--kg-engine sparql (how a world points at QLever or any server): the KG is the endpoint, the dump only feeds
    the label store; here the endpoint is a real `oxigraph serve-read-only` over a copy of the Oxigraph world."""
    import shutil

    from standins.servers import start_oxigraph

    shutil.copytree(ox_world / "kg", tmp_path / "kg")
    proc, url = start_oxigraph(tmp_path / "kg")
    try:
        world = tmp_path / "ep"
        m = build(world, str(dumps / "truthy.nt.gz"), kg_engine="sparql", kg_endpoint=url)
        assert m["kg"]["engine"] == "sparql" and m["kg"]["endpoint"] == url and not (world / "kg").exists()
        assert (world / "labels.sqlite").is_file()
        qid, label, rows = subject(ox_world)
        world_endpoint_tb = Toolbox(settings_for_world(world), reranker=KeepOrderReranker())
        with dspy.context(lm=DemoSensitiveLM(), adapter=dspy.ChatAdapter()):
            trace = build_program("simple",
                                  toolbox=world_endpoint_tb)(question=f"Where was {label} born?").trace
        hop = [q for q in trace["sparql"] if f"wd:{qid} ?p ?o" in q["query"]]
        assert hop and {(r["p"], r["o"]) for r in hop[0]["rows"]} == {(p, plain(o)) for p, o in rows}
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_parts_a_world_lacks_are_absent_not_borrowed(ox_world):
    tb = Toolbox(settings_for_world(ox_world, text_kind="wikipedia", linker_kind="wikidata"))
    assert (tb.settings.text.kind, tb.settings.linker.kind) == ("pack", "pack")
    hits = tb.dense("anything", 3)
    assert hits == [] and hits.error == "world ox has no passages" and tb.text_bm25 is None
    read = AgentTools(tb, "Where is Gabon?", generate_sparql=lambda *a: "")("Read", "Gabon")
    assert read == "Read failed: LookupError: world ox has no passages"  # the agent's Read tool: the reason
