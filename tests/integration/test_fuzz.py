"""Untrusted model output, property-based: random text, random unicode and adversarial SPARQL at ``prepare_query``,
the embedded store, ``HttpSparql`` against a real ``oxigraph serve-read-only`` on 127.0.0.1 (behind a recording
proxy, so we see exactly what reaches the server), garbage HTTP replies, every agent tool, the entity linker,
evaluation rows, and the CLI.

Properties: no exception escapes (tools and ``run`` return observations / results), every call is bounded in time,
the store's triple count and content hash are unchanged, no write operation (and no federated SERVICE call to an
address the query chose) ever reaches a store — checked on the wire, and by a listener that must never be called.
"""

from __future__ import annotations

import hashlib
import json
import os
import socketserver
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from conftest import fake_dense
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sparqlkit import READS

from hqa.data import wikidata as W
from hqa.errors import QueryRejected
from hqa.programs.humaniq_tools import ALL_TOOLS, AgentTools
from hqa.toolbox import Toolbox
from hqa.retrievers.base import SparqlResult
from hqa.retrievers.sparql.guard import LABEL_SERVICE_IRI, MAX_QUERY_CHARS, _service_targets, parse_sparql, prepare_query
from hqa.retrievers.sparql.backends import HttpSparql, OxigraphSparql
from standins.servers import start_oxigraph

REPO = Path(__file__).resolve().parent.parent.parent
FAST = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))
READ_FORMS = {"SELECT", "ASK", "CONSTRUCT", "DESCRIBE"}


# -- local servers: a recording proxy in front of oxigraph, and a listener no query may ever reach ----------------
class _Recorder(ThreadingHTTPServer):
    """Records every request (method, path, SPARQL params); forwards to ``upstream`` or answers 500."""

    daemon_threads = True

    def __init__(self, upstream: str | None = None):
        super().__init__(("127.0.0.1", 0), _RecordingHandler)
        self.upstream = upstream
        self.requests: list[dict] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/query"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _RecordingHandler(BaseHTTPRequestHandler):
    def _handle(self):  # noqa: C901 - a tiny proxy
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        params = parse_qs(parts.query)
        ctype = self.headers.get("Content-Type", "")
        if body and "x-www-form-urlencoded" in ctype:
            params.update(parse_qs(body.decode("utf-8", "replace")))
        elif body and "sparql-update" in ctype:
            params["update"] = [body.decode("utf-8", "replace")]
        elif body:
            params["query"] = [body.decode("utf-8", "replace")]
        self.server.requests.append({"method": self.command, "path": parts.path, "params": params})
        if self.server.upstream is None:
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        headers = {k: self.headers[k] for k in ("Content-Type", "Accept") if self.headers.get(k)}
        target = self.server.upstream + (f"?{parts.query}" if parts.query else "")
        req = urllib.request.Request(target, data=body or None, method=self.command, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=20) as resp:
                status, rtype, data = resp.status, resp.headers.get("Content-Type", ""), resp.read()
        except urllib.error.HTTPError as exc:
            status, rtype, data = exc.code, exc.headers.get("Content-Type", ""), exc.read()
        except OSError:
            status, rtype, data = 502, "text/plain", b"upstream down"
        self.send_response(status)
        if rtype:
            self.send_header("Content-Type", rtype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _handle

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def evil():
    """Where adversarial queries try to send federated calls, loads and dataset fetches. Must stay silent."""
    server = _Recorder()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def kg_store(built_pack) -> Path:
    return built_pack / "pack" / "kg"


@pytest.fixture(scope="module")
def oxigraph_proxy(kg_store):
    proc, url = start_oxigraph(kg_store)
    proxy = _Recorder(upstream=url)
    try:
        yield proxy
    finally:
        proxy.stop()
        proc.terminate()
        proc.wait(timeout=10)


def store_digest(store_path: Path) -> tuple[int, str]:
    """(triple count, sha256 of the sorted quads) of the on-disk store, opened read-only."""
    import pyoxigraph as ox

    store = ox.Store.read_only(str(store_path))
    quads = sorted(str(q) for q in store.quads_for_pattern(None, None, None, None))
    return len(quads), hashlib.sha256("\n".join(quads).encode()).hexdigest()


# -- strategies ---------------------------------------------------------------------------------------------------
EVIL = "http://127.0.0.1:{port}/evil"
UPDATES = [
    "INSERT DATA { <urn:a> <urn:b> <urn:c> }", "DELETE DATA { <urn:a> <urn:b> <urn:c> }", "DELETE WHERE { ?s ?p ?o }",
    "INSERT { ?s <urn:p> 1 } WHERE { ?s ?p ?o }", "WITH <urn:g> DELETE { ?s ?p ?o } WHERE { ?s ?p ?o }",
    "LOAD <{evil}>", "LOAD SILENT <{evil}> INTO GRAPH <urn:g>", "CLEAR ALL", "CLEAR DEFAULT", "DROP ALL",
    "DROP GRAPH <urn:g>", "CREATE GRAPH <urn:g>", "ADD DEFAULT TO <urn:g>", "MOVE DEFAULT TO <urn:g>",
    "COPY DEFAULT TO <urn:g>", "LOAD <file:///etc/passwd>",
]
SMUGGLERS = [  # each tries to make a store talk to {evil} (SSRF) or to write
    "SELECT * WHERE {{ SERVICE <{evil}> {{ ?s ?p ?o }} }}",
    "select * where {{ service   silent\n<{evil}> {{ ?s ?p ?o }} }}",
    "SELECT * WHERE {{ \\u0053ERVICE <{evil}> {{ ?s ?p ?o }} }}",
    "SELECT * WHERE {{ \\U00000053ERVICE <{evil}> {{ ?s ?p ?o }} }}",
    'PREFIX wikibase: <{evil}#>\nSELECT ?x WHERE {{ wd:Q1000 wdt:P36 ?x . SERVICE wikibase:label '
    '{{ bd:serviceParam wikibase:language "en" . }} }}',
    "PREFIX wikibase: <{evil}#>\nSELECT ?x WHERE {{ wd:Q1000 wdt:P36 ?x . SERVICE wikibase:label {{ {{ {{ ?x ?p ?o }} }} }} }}",
    "SELECT ?x WHERE {{ wd:Q1000 wdt:P36 ?x . SERVICE wikibase:label {{ {{ {{ ?x ?p ?o }} }} }} }}",
    "PREFIX e: <{evil}>\nSELECT * WHERE {{ SERVICE e:x {{ ?s ?p ?o }} }}",
    "BASE <{evil}/>\nSELECT * WHERE {{ SERVICE <label> {{ ?s ?p ?o }} }}",
    "SELECT * WHERE {{ ?s ?p ?o FILTER EXISTS {{ SERVICE <{evil}> {{ ?s ?p ?o }} }} }}",
    "SELECT * WHERE {{ {{ SELECT * WHERE {{ SERVICE <{evil}> {{ ?s ?p ?o }} }} }} }}",
    "SELECT * WHERE {{ OPTIONAL {{ ?s ?p ?o }} UNION {{ SERVICE <{evil}> {{ ?s ?p ?o }} }} }}",
    "SELECT * WHERE {{ VALUES ?e {{ <{evil}> }} SERVICE ?e {{ ?s ?p ?o }} }}",
    'SELECT * WHERE {{ BIND(IRI("{evil}") AS ?e) SERVICE ?e {{ ?s ?p ?o }} }}',
    "SELECT * FROM <{evil}> WHERE {{ ?s ?p ?o }}",
    "SELECT * FROM NAMED <{evil}> WHERE {{ GRAPH ?g {{ ?s ?p ?o }} }}",
    'SELECT ?x WHERE {{ ?x rdfs:label "LOAD <{evil}>" }}',
    "SELECT * WHERE {{ ?s ?p ?o }} # SERVICE <{evil}>",
    "SELECT * WHERE {{ ?s ?p ?o . # }}\nSERVICE <{evil}> {{ ?s ?p ?o }} }}",
    'SELECT * WHERE {{ ?s ?p """ \nSERVICE <{evil}> {{ }} """ }}',
    'SELECT * WHERE {{ ?s ?p "\\u0022 . SERVICE <{evil}> {{ ?s ?p ?o }} # " }}',
    "PREFIX wd: <{evil}/>\nSELECT ?x WHERE {{ wd:Q1000 wdt:P36 ?x }}",
    "PREFIX wd: <{evil}/>\nLOAD <{evil}>",
    "SELECT * WHERE {{ ?s ?p ?o }} ; LOAD <{evil}>",
    "SELECT * WHERE {{ ?s ?p ?o }}\n#\nINSERT DATA {{ <urn:a> <urn:b> <urn:c> }}",
    "SELECT * WHERE {{ ?s ?p ?o }} LIMIT 1 # \"\nDROP ALL",
]
NOISE = ["{", "}", '"', "'", '"""', "#", "\n", "<", ">", ";", ".", "\\", "\\u0053", "\x00", " SERVICE ", " INSERT ",
         " load ", " DrOp ", "PREFIX wd: <http://evil.example/>\n", " LIMIT 99999 ", " VALUES ?s { wd:Q1 } ",
         "\u202e", "\ud800", "\ufeff", "\u00a0", "wikibase:label", "?", "(", ")", "SELECT", "ASK"]


def casing(text: str, flips: list[bool]) -> str:
    flips = flips + [False] * (len(text) - len(flips))
    return "".join(c.swapcase() if f else c for c, f in zip(text, flips))


@st.composite
def mutated(draw, bases):
    """A base query with a few random insertions, deletions and duplications."""
    q = draw(st.sampled_from(bases))
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, len(q)))
        op = draw(st.sampled_from(["insert", "delete", "duplicate", "case"]))
        if op == "insert":
            q = q[:i] + draw(st.sampled_from(NOISE) | st.text(max_size=4)) + q[i:]
        elif op == "delete":
            q = q[:i] + q[draw(st.integers(i, min(len(q), i + 12))):]
        elif op == "duplicate":
            q = q[:i] + q[i:i + 24] + q[i:]
        else:
            q = casing(q, draw(st.lists(st.booleans(), max_size=len(q))))
    return q


def adversarial(port: int):
    evil_url = EVIL.format(port=port)
    updates = [u.replace("{evil}", evil_url) for u in UPDATES]
    smugglers = [s.format(evil=evil_url) for s in SMUGGLERS]
    return st.one_of(
        st.text(max_size=200),  # random text (any unicode, surrogates included)
        st.text(st.characters(codec="utf-8"), max_size=200),
        st.builds(lambda u, flips, sep: casing(u, flips).replace(" ", sep), st.sampled_from(updates),
                  st.lists(st.booleans(), max_size=60),
                  st.sampled_from([" ", "\n", "\t", "  ", " #c\n ", "\r\n", "\n#INSERT\n"])),
        st.builds(lambda r, u, sep: r + sep + u, st.sampled_from(READS), st.sampled_from(updates),
                  st.sampled_from([" ; ", "\n", " # \n", " "])),
        st.builds(lambda n, body: "SELECT * WHERE " + "{" * n + body + "}" * n, st.integers(0, 60),
                  st.sampled_from([" ?s ?p ?o ", " ", "SERVICE <" + evil_url + "> { }", " INSERT DATA { } "])),
        st.builds(lambda r, n: r + " " * n, st.sampled_from(READS), st.integers(MAX_QUERY_CHARS - 200, MAX_QUERY_CHARS + 50)),
        st.builds(lambda r, i: r[:i] + "\x00" + r[i:], st.sampled_from(READS), st.integers(0, 40)),
        st.sampled_from(READS + smugglers + updates),
        st.sampled_from(['SELECT ?x WHERE { ?x rdfs:label "unterminated }', "ASK {", "\x00", "#", "x" * 30_000]),
        st.builds(lambda n: "{" * n + "SELECT" + "}" * n, st.integers(0, 60)),
        mutated(READS + smugglers),
    )


# a generated set of valid read queries every gate must accept.  Variable and local names avoid the SPARQL Update
# keywords (a keyword-based gate could not tell ``?insert`` from INSERT; an algebra-based one can, and has its own
# cases for that).
UPDATE_WORDS = {"insert", "delete", "load", "clear", "drop", "create", "add", "move", "copy", "with", "using"}
VAR_NAMES = ["x", "y", "item", "person", "city", "country", "value", "lbl", "s", "o", "film", "year", "n2"]
WORDS = ["Gabon", "Libreville", "Zürich", "中文", "Ömer", "Rio de Janeiro", "2001", "A Space Odyssey", "café"]
assert not set(VAR_NAMES) & UPDATE_WORDS


@st.composite
def valid_reads(draw):
    """A SELECT or ASK query of 1-3 triple patterns over wd:/wdt:/rdfs: terms, with FILTER / OPTIONAL / ORDER BY /
    DISTINCT / LIMIT variations; every variable it projects is bound in its pattern."""
    var = st.sampled_from(VAR_NAMES).map(lambda v: "?" + v)
    ent = st.integers(1, 99999).map(lambda n: f"wd:Q{n}")
    prop = st.one_of(st.integers(1, 9999).map(lambda n: f"wdt:P{n}"), st.just("rdfs:label"))
    lit = st.sampled_from(WORDS).map(lambda w: f'"{w}"@en')
    used: list[str] = []

    def term(strategy):
        t = draw(strategy)
        if t.startswith("?"):
            used.append(t)
        return t

    patterns = []
    for _ in range(draw(st.integers(1, 3))):
        # a later pattern's subject is a variable already used: the patterns join, never a cartesian product
        # (labels x labels ORDER BY is a valid read, but a slow one, and timing out is not what these tests check)
        subject = st.sampled_from(sorted(set(used))) if used else st.one_of(var, ent)
        patterns.append(f"{term(subject)} {term(st.one_of(prop, var))} {term(st.one_of(var, ent, lit))} .")
    if not used:
        patterns.append(f"{term(var)} rdfs:label {term(var)} .")
    body = " ".join(patterns)
    extra = draw(st.sampled_from(["", "optional", "filter_lang", "filter_ne", "filter_contains"]))
    v = draw(st.sampled_from(used))
    if extra == "optional":
        body += f" OPTIONAL {{ {v} rdfs:label {term(var)} . }}"
    elif extra == "filter_lang":
        body += f" FILTER(!isLiteral({v}) || LANG({v}) = \"en\")"
    elif extra == "filter_ne":
        body += f" FILTER({v} != {draw(ent)})"
    elif extra == "filter_contains":
        body += f" FILTER(CONTAINS(STR({v}), \"{draw(st.sampled_from(WORDS))}\"))"
    if draw(st.booleans()):
        return f"ASK {{ {body} }}"
    names = sorted(set(used))
    projection = draw(st.sampled_from(["*", " ".join(names), names[0]]))
    query = f"SELECT {draw(st.sampled_from(['', 'DISTINCT ']))}{projection} WHERE {{ {body} }}"
    if draw(st.booleans()):
        query += f" ORDER BY {draw(st.sampled_from(names))}"
    if draw(st.booleans()):
        query += f" LIMIT {draw(st.integers(1, 1000))}"
    return query


def assert_accepted(text: str, limit: int = 100, *, local: bool = True) -> tuple[str, str]:
    """A valid read query passes the gate (and comes out a read query): the gate is not just rejecting everything."""
    try:
        form, full = prepare_query(text, limit, local_labels=local)
    except QueryRejected as exc:
        raise AssertionError(f"a valid read query was rejected: {text!r}: {exc}") from None
    assert form == text.split()[0].upper()
    assert_read_only_query(full, label_service_ok=not local)
    return form, full


def parses_as_update(text: str) -> bool:
    from rdflib.plugins.sparql.parser import parseUpdate

    for candidate in (text, text.strip().strip("`").strip()):
        if not candidate.strip():
            continue
        try:
            parseUpdate(W.prefix_block(candidate) + candidate)
            return True
        except Exception:  # noqa: BLE001 - anything rdflib cannot parse as an update is not one
            continue
    return False


def assert_read_only_query(full: str, *, label_service_ok: bool) -> None:
    """What goes to a store is a parseable read query with no federated call."""
    parsed = parse_sparql(full)  # hqa's parser thread, whose stack holds the deep queries it accepted (issue 40)
    assert parsed[1].name.replace("Query", "").upper() in READ_FORMS
    targets = _service_targets(parsed)
    assert all(label_service_ok and t == LABEL_SERVICE_IRI for t in targets), targets


# -- prepare_query: pure function, many examples -----------------------------------------------------------------
@settings(max_examples=150, **FAST)
@given(text=adversarial(port=9), limit=st.integers(1, 500), local=st.booleans())
def test_prepare_query_is_a_read_only_gate(text, limit, local):
    try:
        form, full = prepare_query(text, limit, local_labels=local)
    except QueryRejected as exc:
        assert str(exc)
        return
    assert not parses_as_update(text), "a SPARQL Update was accepted"
    assert form in READ_FORMS
    assert_read_only_query(full, label_service_ok=not local)
    if form != "ASK":
        top = parse_sparql(full)[1]
        cap = (top.get("limitoffset") or {}).get("limit")
        assert cap is not None and int(cap) <= limit + 1  # a row LIMIT is always imposed


@settings(max_examples=150, **FAST)
@given(text=valid_reads(), limit=st.integers(1, 500), local=st.booleans())
def test_prepare_query_accepts_valid_reads(text, limit, local):
    form, full = assert_accepted(text, limit, local=local)
    if form == "SELECT":
        cap = (parse_sparql(full)[1].get("limitoffset") or {}).get("limit")
        assert cap is not None and int(cap) <= limit + 1


@pytest.mark.parametrize("template", SMUGGLERS)
def test_no_smuggled_call_or_write_gets_through(template):
    query = template.format(evil=EVIL.format(port=9))
    for local in (True, False):
        try:
            _, full = prepare_query(query, local_labels=local)
        except QueryRejected:
            continue
        assert_read_only_query(full, label_service_ok=not local)


# -- the embedded store ------------------------------------------------------------------------------------------
class RecordingStore:
    """Wraps a pyoxigraph Store and records every method called on it."""

    def __init__(self, real):
        self._real = real
        self.calls: list[tuple[str, object]] = []

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            self.calls.append((name, args[0] if args else None))
            return attr(*args, **kwargs)

        return call


def test_embedded_store_never_written_and_never_federates(kg_store, evil):
    before = store_digest(kg_store)
    backend = OxigraphSparql(kg_store, timeout=3, limit=20)
    backend.store = recorder = RecordingStore(backend.store)
    evil.requests.clear()

    @settings(max_examples=40, **FAST)
    @given(adversarial(evil.server_address[1]))
    def run(text):
        res = backend.run(text)
        assert isinstance(res, SparqlResult) and (res.ok or res.error.strip())
        assert len(res.rows) <= 20
        json.dumps(res.to_dict(), ensure_ascii=False)

    run()
    assert {name for name, _ in recorder.calls} <= {"query"}
    for _, full in recorder.calls:
        assert_read_only_query(full, label_service_ok=False)

    # the valid reads test what reaches the store, not how fast it parses: on a loaded machine (a CI run at load
    # average 8) one took over the 3 s bound above and was refused
    backend.timeout = 120

    @settings(max_examples=40, **FAST)
    @given(valid_reads())
    def accept(text):
        n = len(recorder.calls)
        res = backend.run(text)
        assert res.ok, (text, res.error)
        # exactly the prepared query reached the store, once
        assert recorder.calls[n:] == [("query", assert_accepted(text, 20, local=True)[1])]

    accept()
    assert evil.requests == []
    assert store_digest(kg_store) == before


@pytest.fixture()
def writable_backend(kg_store, tmp_path):
    """An OxigraphSparql over a *writable* store holding a copy of part of the pack's graph: a write that got through
    would land (the pack's own store is opened read-only, where it could not)."""
    import pyoxigraph as ox

    source = ox.Store.read_only(str(kg_store))
    store = ox.Store(str(tmp_path / "writable"))
    store.extend(list(source.quads_for_pattern(None, None, None, None))[:5000])
    store.flush()
    backend = OxigraphSparql(kg_store, timeout=3, limit=20)
    backend.store = store
    return backend


def writable_digest(store) -> tuple[int, str]:
    quads = sorted(str(q) for q in store.quads_for_pattern(None, None, None, None))
    return len(quads), hashlib.sha256("\n".join(quads).encode()).hexdigest()


def test_writable_store_is_never_written(writable_backend, evil):
    store = writable_backend.store
    before = writable_digest(store)
    assert before[0] > 0
    # the store does take writes: a direct update lands, and is undone
    store.update("INSERT DATA { <urn:probe> <urn:p> <urn:o> }")
    assert writable_digest(store)[0] == before[0] + 1
    store.update("DELETE DATA { <urn:probe> <urn:p> <urn:o> }")
    assert writable_digest(store) == before
    evil.requests.clear()
    for text in [u.replace("{evil}", EVIL.format(port=evil.server_address[1])) for u in UPDATES]:
        res = writable_backend.run(text)
        assert not res.ok and res.error, text
        res = writable_backend.run("SELECT * WHERE { ?s ?p ?o } ; " + text)
        assert writable_digest(store) == before, text

    @settings(max_examples=40, **FAST)
    @given(adversarial(evil.server_address[1]))
    def run(text):
        writable_backend.run(text)
        assert writable_digest(store) == before, text

    run()

    # what reaches the store is checked here, not speed: a loaded machine may take over 3 s to parse a valid read
    writable_backend.timeout = 120

    @settings(max_examples=20, **FAST)
    @given(valid_reads())
    def accept(text):
        assert writable_backend.run(text).ok, text

    accept()
    assert evil.requests == []
    assert writable_digest(store) == before


# -- HttpSparql against a real oxigraph serve-read-only ------------------------------------------------------------
@pytest.mark.server
def test_http_endpoint_never_written_and_never_federates(kg_store, oxigraph_proxy, evil):
    before = store_digest(kg_store)
    http = HttpSparql(oxigraph_proxy.url, timeout=5, limit=20, retries=0)
    oxigraph_proxy.requests.clear()
    evil.requests.clear()
    assert http.run("SELECT ?x WHERE { wd:Q1000 wdt:P36 ?x }").rows == [{"x": W.WD + "Q3825"}]

    @settings(max_examples=40, **FAST)
    @given(adversarial(evil.server_address[1]))
    def run(text):
        res = http.run(text)
        assert isinstance(res, SparqlResult) and (res.ok or res.error.strip())
        assert len(res.rows) <= 20
        json.dumps(res.to_dict(), ensure_ascii=False)
        # a live endpoint is never reported as down because of what a query says (a resume would retry it)
        assert not res.unavailable or "wikibase:label" in text, res.error

    run()
    assert oxigraph_proxy.requests, "nothing reached the server"
    for req in oxigraph_proxy.requests:  # what actually went over the wire
        assert "update" not in req["params"]
        for query in req["params"].get("query", []):
            assert_read_only_query(query, label_service_ok=True)

    @settings(max_examples=30, **FAST)
    @given(valid_reads())
    def accept(text):
        n = len(oxigraph_proxy.requests)
        res = http.run(text)
        assert res.ok, (text, res.error)
        sent = [q for req in oxigraph_proxy.requests[n:] for q in req["params"].get("query", [])]
        assert sent == [assert_accepted(text, 20, local=False)[1]]  # the prepared query went over the wire, once

    accept()
    assert evil.requests == []
    count = http.run("SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }").rows[0]["n"]
    assert (int(count), store_digest(kg_store)[1]) == before


# -- garbage from an endpoint ----------------------------------------------------------------------------------------
class _RawReply(socketserver.ThreadingTCPServer):
    """Answers every request with whatever bytes ``self.reply`` holds (not necessarily HTTP), then closes."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _RawHandler)
        self.reply: bytes = b""
        self.trickle = 0.0
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _RawHandler(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.settimeout(5)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = self.request.recv(65536)
                if not chunk:
                    return
                data += chunk
            if self.server.trickle:
                for i in range(len(self.server.reply)):
                    self.request.sendall(self.server.reply[i:i + 1])
                    time.sleep(self.server.trickle)
            else:
                self.request.sendall(self.server.reply)
        except OSError:
            pass


def _http(status: int, ctype: str, body: bytes, framing: str) -> bytes:
    head = f"HTTP/1.1 {status} X\r\n" + (f"Content-Type: {ctype}\r\n" if ctype else "")
    if framing == "length":
        return (head + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
    if framing == "short":  # promises more than it sends: the connection is cut mid-reply
        return (head + f"Content-Length: {len(body) + 100}\r\nConnection: close\r\n\r\n").encode() + body
    if framing == "chunked-broken":
        return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + b"zz\r\n" + body
    if framing == "close":
        return (head + "Connection: close\r\n\r\n").encode() + body
    return body  # not HTTP at all


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=20)
sparql_json = st.builds(
    lambda vars_, rows, extra: {"head": {"vars": vars_}, "results": {"bindings": rows}, **extra},
    json_values | st.lists(st.text(max_size=5), max_size=3),
    json_values | st.lists(st.dictionaries(st.text(max_size=5), json_values | st.fixed_dictionaries(
        {"type": st.sampled_from(["uri", "literal"]), "value": json_values}), max_size=3), max_size=150),
    st.fixed_dictionaries({}) | st.fixed_dictionaries({"boolean": json_values}),
)
bodies = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda v: json.dumps(v).encode(), json_values),
    st.builds(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass"), sparql_json),
    st.builds(lambda n: b"[" * n + b"]" * n, st.integers(500, 200_000)),
    st.builds(lambda v, cut: json.dumps(v).encode()[:cut], sparql_json, st.integers(0, 50)),
    st.just(b'{"head":{"vars":["x"]},"results":{"bindings":[{"x":{"type":"literal","value":"\\ud800"}}]}}'),
)
replies = st.builds(_http, st.sampled_from([200, 200, 200, 204, 301, 400, 401, 403, 404, 414, 429, 500, 502, 503]),
                    st.sampled_from(["application/sparql-results+json", "application/json", "text/html", ""]),
                    bodies, st.sampled_from(["length", "length", "short", "chunked-broken", "close", "raw"]))


def test_http_sparql_survives_any_reply():
    server = _RawReply()
    url = f"http://127.0.0.1:{server.server_address[1]}/sparql"
    http = HttpSparql(url, timeout=1, limit=20, retries=1, backoff=0.01)
    try:
        @settings(max_examples=40, **FAST)
        @given(replies)
        def run(reply):
            server.reply = reply
            res = http.run("SELECT ?x WHERE { ?x ?p ?o }")
            assert isinstance(res, SparqlResult) and (res.ok or res.error.strip())
            assert len(res.rows) <= 20 and all(isinstance(v, str) for row in res.rows for v in row.values())
            json.dumps(res.to_dict(), ensure_ascii=False)

        run()
        # a server trickling a valid reply one byte at a time cannot hold a call past its timeout
        server.reply = _http(200, "application/json", b'{"head":{"vars":[]},"results":{"bindings":[]}}' + b" " * 40,
                             "length")
        server.trickle = 0.1
        res = http.run("SELECT ?x WHERE { ?x ?p ?o }")
        assert not res.ok and res.unavailable  # the whole (valid) reply would have taken 4 s and parsed
    finally:
        server.shutdown()
        server.server_close()


# -- every agent tool and the linker ---------------------------------------------------------------------------------
tool_args = st.one_of(st.text(max_size=300), st.sampled_from(["Q1000", "Q1000, Q3825", "['Q1000']", "P36 Q99999999999",
                                                               "Gabon and Libreville", "Gabon", "x" * 5000, "", "   "]),
                      st.builds(str, st.integers()), st.none())


@pytest.mark.server
@pytest.mark.parametrize("backend", ["oxigraph", "sparql"])
def test_every_tool_returns_an_observation(backend, settings_for, kg_store, oxigraph_proxy, evil):
    before = store_digest(kg_store)
    overrides = {"kg_kind": "sparql", "kg_endpoint": oxigraph_proxy.url} if backend == "sparql" else {}
    tb = Toolbox(settings_for(**overrides), dense=fake_dense)
    if backend == "sparql":
        tb.sparql.client.settings.max_retries = 0
    else:
        tb.sparql.store = RecordingStore(tb.sparql.store)
    oxigraph_proxy.requests.clear()
    evil.requests.clear()
    text = adversarial(evil.server_address[1])

    @settings(max_examples=40, **FAST)
    @given(st.sampled_from(ALL_TOOLS + ("Finish", "Nope", "", "runsparql")), text | tool_args, text | tool_args)
    def run(tool, arg, generated):
        tools = AgentTools(tb, "Who is the head of Gabon?", lambda *a: generated)
        out = tools(tool, arg)
        assert isinstance(out, str) and out
        assert len(tools.calls) == 1 and json.dumps(tools.calls[0].to_dict(), ensure_ascii=False, default=str)

    run()
    if backend == "sparql":
        assert all("update" not in r["params"] for r in oxigraph_proxy.requests)
        for r in oxigraph_proxy.requests:
            for query in r["params"].get("query", []):
                assert_read_only_query(query, label_service_ok=True)
    else:
        assert {name for name, _ in tb.sparql.store.calls} <= {"query"}
    assert evil.requests == []
    assert store_digest(kg_store) == before


# -- the CLI -------------------------------------------------------------------------------------------------------
def run_cli(args, tmp_path, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HQA_")}
    # a fresh artifacts dir (own LM cache) and short replies: these runs test robustness, not answers
    env.update(HQA_PATHS__ARTIFACTS=str(tmp_path / "artifacts"), HQA_LM__MAX_TOKENS="32", HQA_LM__N_CTX="2048")
    return subprocess.run([sys.executable, "-m", "hqa.cli", *args], capture_output=True, env=env, cwd=tmp_path,
                          timeout=timeout)


def assert_answer_or_one_line_error(proc) -> None:
    err = proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err[-3000:]
    if proc.returncode == 0:
        out = json.loads(proc.stdout)
        assert isinstance(out["answer"], str) and out["trace"]["program"] == "closedbook"
    else:
        assert proc.returncode == 2
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines and lines[-1].startswith("hqa: error:"), err[-2000:]


argv_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=0, max_size=300)


@pytest.mark.real_lm
def test_cli_odd_questions(tmp_path):
    @settings(max_examples=2, **FAST)
    @given(argv_text)
    def run(question):
        assert_answer_or_one_line_error(run_cli(["ask", "--program", "closedbook", "--json", "--", question],
                                                tmp_path))

    run()
    for question in ("'; DROP ALL; -- SELECT * WHERE { SERVICE <http://127.0.0.1:9/x> { ?s ?p ?o } }", "\t \n "):
        assert_answer_or_one_line_error(run_cli(["ask", "--program", "closedbook", "--json", "--", question],
                                                tmp_path))


@pytest.mark.real_lm
def test_cli_question_with_undecodable_bytes(tmp_path):
    """argv bytes that are not UTF-8 reach Python as lone surrogates, which no LM request can carry."""
    assert_answer_or_one_line_error(run_cli(["ask", "--program", "closedbook", "--json", b"caf\xff \xfe?"], tmp_path))
