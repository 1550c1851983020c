"""Read-only SPARQL: query checking, the embedded store, and a real `oxigraph serve-read-only` over HTTP."""

import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from hqa.retrievers.sparql.backends import HttpSparql
from standins.servers import free_port, start_oxigraph

WD = "http://www.wikidata.org/entity/"


@pytest.fixture(scope="module")
def oxigraph_server(built_pack):
    proc, url = start_oxigraph(built_pack / "pack" / "kg")
    yield url, proc
    proc.terminate()
    proc.wait(timeout=10)


@pytest.mark.server
def test_http_endpoint_matches_embedded_store(oxigraph_server, store):
    url, _ = oxigraph_server
    http = HttpSparql(url, timeout=5, limit=20, retries=0)
    http.ping()
    q = "SELECT ?x WHERE { wd:Q1000 wdt:P36 ?x }"
    assert http.run(q).rows == store.run(q).rows == [{"x": WD + "Q3825"}]
    assert http.labels(["Q1000"]) == {"Q1000": "Gabon"}
    assert not http.run("INSERT DATA { <urn:a> <urn:b> <urn:c> }").ok
    bad = http.run("SELECT ?x WHERE { ?x ?y }")
    assert not bad.ok


@pytest.mark.server
def test_http_endpoint_down_is_reported(oxigraph_server):
    url, proc = oxigraph_server
    dead = f"http://127.0.0.1:{free_port()}/query"
    res = HttpSparql(dead, timeout=2, retries=1, backoff=0.01).run("SELECT ?x WHERE { ?x ?p ?o }")
    assert not res.ok and "unreachable" in res.error


class _Stall(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        time.sleep(3)
        self.send_response(200)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *a):
        pass


class _Garbage(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = b"<html>not json at all"
        self.send_response(200)
        self.send_header("Content-Type", "application/sparql-results+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *a):
        pass


@pytest.mark.parametrize("handler,needle", [(_Stall, "unreachable"), (_Garbage, "garbage")])
def test_http_endpoint_stalling_or_garbage(handler, needle):
    server = HTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/sparql"
        res = HttpSparql(url, timeout=1, retries=0).run("SELECT ?x WHERE { ?x ?p ?o }")
        assert not res.ok and needle in res.error
    finally:
        server.shutdown()
        server.server_close()


def test_a_hop_over_the_pack_imports_no_sparql_parser(built_pack):
    """The default program's one hop runs only queries code builds, so rdflib is never imported (its parser's import
    is ~0.26 s of a cold `hqa ask`)."""
    import subprocess
    import sys

    code = ("import sys; from hqa.config import load_settings; from hqa.toolbox import Toolbox; "
            "from hqa.retrievers.hop import HopRetriever, HopRequest; tb = Toolbox(load_settings()); tb.check(); "
            "q = 'Who is the author of Animal Farm?'; "
            "hop = HopRetriever(tb).run(q, HopRequest(searches=[q], triple_queries=[q], spot=2, "
            "neighbourhood_limit=30)); "
            "assert any(r.rows for r in hop.sparql_results), hop.sparql_results; "
            "print(sorted(m for m in sys.modules if m.startswith('rdflib')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_queries_checked_from_many_threads_at_once_all_pass():
    """rdflib's SPARQL grammar is shared state: the guard parses one query at a time, so threads (``hqa evaluate
    --threads 4``) never see a valid query refused as malformed."""
    from concurrent.futures import ThreadPoolExecutor

    from hqa.retrievers.sparql.guard import prepare_query

    def check(i: int) -> str:  # distinct variable names: a new shape each, so none is answered by the memo
        return prepare_query(f"SELECT ?p{i} ?o{i} WHERE {{ wd:Q42 ?p{i} ?o{i} . "
                             f'FILTER(STRSTARTS(STR(?p{i}), "http://www.wikidata.org/prop/direct/")) }} LIMIT 30')[0]

    with ThreadPoolExecutor(max_workers=8) as pool:
        forms = list(pool.map(check, range(400)))
    assert forms == ["SELECT"] * 400
