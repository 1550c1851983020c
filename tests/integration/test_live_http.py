"""The live-source HTTP layer and the ``wikipedia`` text source against a loopback MediaWiki Action API server.

The server answers in the MediaWiki Action API's JSON shape (formatversion=2): ``list=search`` →
``{"query": {"search": [{"ns", "title", "pageid"}]}}``, ``prop=extracts`` → ``{"query": {"pages": [{"pageid",
"ns", "title", "extract"}], "redirects": [...]}}``, maxlag → HTTP 503 with ``Retry-After`` and
``{"error": {"code": "maxlag", "info": ...}}`` (https://www.mediawiki.org/wiki/Manual:Maxlag_parameter).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from hqa.config import HTTPConfig
from hqa.retrievers.http import (BadResponse, HTTPClient, NotInCache, TooLarge, Unavailable, cache_export,
                      cache_import, cache_stats)
from hqa.retrievers.wikipedia import WikipediaSource, split_passages

PAGES = {
    "Moby-Dick": "Moby-Dick; or, The Whale is an 1851 novel by American writer Herman Melville.\n\n== Plot ==\n"
    + "Ishmael travels to New Bedford. " * 40,
    "Herman Melville": "Herman Melville was an American novelist of the American Renaissance period.",
}
REDIRECTS = {"Moby Dick": "Moby-Dick"}
UA = "hqa-test/1.0 (https://example.org/hqa; test@example.org)"


class Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log: list = []
    fault: list = []  # consumed one per request: "429", "maxlag", "slow", "truncated", "html", "huge", "huge_chunked"

    def log_message(self, *args):  # quiet
        pass

    def _send(self, code: int, body: bytes, ctype="application/json; charset=utf-8", headers=None, length=True):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if length:
            self.send_header("Content-Length", str(len(body)))
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        type(self).log.append({"path": url.path, "params": q, "ua": self.headers.get("User-Agent"),
                               "cache_control": self.headers.get("Cache-Control")})
        fault = type(self).fault.pop(0) if type(self).fault else None
        if fault == "429":
            return self._send(429, b"Too many requests", "text/plain", {"Retry-After": "1"})
        if fault == "429date":  # Retry-After as an HTTP date (RFC 9110 §10.2.3), far in the future
            return self._send(429, b"Too many requests", "text/plain", {"Retry-After": "Fri, 31 Dec 2100 23:59:59 GMT"})
        if fault == "maxlag":
            err = {"error": {"code": "maxlag", "info": "Waiting for 10.64.0.1: 7 seconds lagged."}}
            return self._send(503, json.dumps(err).encode(), headers={"Retry-After": "5", "X-Database-Lag": "7"})
        if fault == "maxlag200":  # some front ends deliver the maxlag error object with HTTP 200
            err = {"error": {"code": "maxlag", "info": "Waiting for a database server: 6 seconds lagged."}}
            return self._send(200, json.dumps(err).encode(), headers={"Retry-After": "2"})
        if fault == "slow":
            time.sleep(1.5)
        if fault == "truncated":
            return self._send(200, b'{"batchcomplete": true, "query": {"search": [{"ns": 0, "ti')
        if fault == "html":
            return self._send(502, b"<!DOCTYPE html><html><body>Bad Gateway</body></html>", "text/html")
        if fault == "html200":
            return self._send(200, b"<!DOCTYPE html><html><body>Wikimedia Error</body></html>", "text/html")
        if fault == "apierror":
            err = {"error": {"code": "badvalue", "info": "Unrecognized value for parameter \"list\": nosuch."}}
            return self._send(200, json.dumps(err).encode())
        if fault == "huge":
            return self._send(200, b'{"x": "' + b"a" * 200_000 + b'"}')
        if fault == "huge_nolength":
            return self._send(200, b'{"x": "' + b"a" * 200_000 + b'"}', length=False)
        if q.get("list") == "search":
            words = q.get("srsearch", "").lower().split()
            hits = [t for t in PAGES if any(w in t.lower() or w in PAGES[t].lower() for w in words)]
            hits = hits[: int(q.get("srlimit", "10"))]
            body = {"batchcomplete": True, "query": {"searchinfo": {"totalhits": len(hits)},
                    "search": [{"ns": 0, "title": t, "pageid": i + 1} for i, t in enumerate(hits)]}}
            return self._send(200, json.dumps(body).encode())
        if q.get("prop") == "extracts":
            title = q.get("titles", "")
            query: dict = {}
            if q.get("redirects") and title in REDIRECTS:
                query["redirects"] = [{"from": title, "to": REDIRECTS[title]}]
                title = REDIRECTS[title]
            if title in PAGES:
                text = PAGES[title].split("\n")[0] if "exintro" in q else PAGES[title]
                query["pages"] = [{"pageid": 1, "ns": 0, "title": title, "extract": text}]
            else:
                query["pages"] = [{"ns": 0, "title": title, "missing": True}]
            return self._send(200, json.dumps({"batchcomplete": True, "query": query}).encode())
        return self._send(400, json.dumps({"error": {"code": "badvalue", "info": "unknown"}}).encode())


@pytest.fixture()
def api():
    Api.log, Api.fault = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}/w/api.php"
    server.shutdown()
    server.server_close()


def client(tmp_path, mode="live", sleeps=None, **kw):
    settings = HTTPConfig(cache_mode=mode, cache_path=str(tmp_path / "cache.sqlite"), user_agent=UA,
                            max_retries=kw.pop("max_retries", 2), **kw)
    return HTTPClient(settings, sleep=(sleeps.append if sleeps is not None else lambda s: None))


def leads(source: WikipediaSource, query: str, k: int = 3) -> list:
    """(title, lead) of the top ``k`` pages for ``query``, as the agent's WikiSearch reads them."""
    return [source.lead(t) for t in source.search_titles(query, k)]


def test_search_leads_ua_and_params_on_the_wire(api, tmp_path):
    _, url = api
    found = dict(leads(WikipediaSource(client(tmp_path), url), "Melville novel", k=2))
    assert found["Moby-Dick"].startswith("Moby-Dick; or, The Whale is an 1851 novel")
    assert found["Herman Melville"].startswith("Herman Melville was an American novelist")
    assert "Plot" not in found["Moby-Dick"]  # exintro: summary only
    assert all(r["ua"] == UA for r in Api.log)
    search = Api.log[0]["params"]
    assert search["action"] == "query" and search["list"] == "search" and search["srsearch"] == "Melville novel"
    assert search["maxlag"] == "5" and search["format"] == "json" and search["srlimit"] == "2"
    extract = Api.log[1]["params"]
    assert extract["prop"] == "extracts" and extract["exintro"] == "1" and extract["explaintext"] == "1"
    assert extract["redirects"] == "1"


def test_redirect_followed_and_page_split_into_passages(api, tmp_path):
    _, url = api
    source = WikipediaSource(client(tmp_path), url)
    title, lead = source.lead("Moby Dick")
    assert title == "Moby-Dick" and lead.startswith("Moby-Dick; or, The Whale")
    passages = source.page("Moby Dick")
    assert len(passages) >= 2 and all(len(p.text) <= 600 for p in passages)
    assert passages[0].title == "Moby-Dick" and "exintro" not in Api.log[-1]["params"]
    assert source.lead("Nonexistent page") is None
    assert [p.index for p in split_passages("T", "a. " * 500)] == list(range(len(split_passages("T", "a. " * 500))))


def test_429_retry_after_honoured(api, tmp_path):
    _, url = api
    Api.fault = ["429"]
    sleeps: list[float] = []
    data = client(tmp_path, sleeps=sleeps).get_json(url, {"action": "query", "list": "search", "srsearch": "x"},
                                                    mediawiki=True)
    assert "query" in data and sleeps == [1.0] and len(Api.log) == 2


def test_maxlag_503_retried_then_gives_up_with_typed_error(api, tmp_path):
    _, url = api
    Api.fault = ["maxlag"] * 3
    sleeps: list[float] = []
    source = WikipediaSource(client(tmp_path, sleeps=sleeps, max_retries=2), url)
    with pytest.raises(Unavailable, match="503.*gave up after 3 attempts"):
        source.search_titles("Melville")
    assert sleeps == [5.0, 5.0]
    with pytest.raises(Unavailable):
        Api.fault = ["maxlag"] * 3
        client(tmp_path / "b", max_retries=2).get_json(url, {"list": "search"}, mediawiki=True)


def test_maxlag_error_object_on_http_200_is_retried(api, tmp_path):
    _, url = api
    Api.fault = ["maxlag200"]
    sleeps: list[float] = []
    title, _lead = WikipediaSource(client(tmp_path, sleeps=sleeps), url).lead("Moby-Dick")
    assert title == "Moby-Dick" and sleeps == [2.0] and len(Api.log) == 2


def test_backoff_exponential_with_jitter_and_cap(tmp_path):
    c = client(tmp_path, backoff_base=1.0, backoff_cap=4.0)
    draws = [c._backoff(attempt, None) for attempt in range(8) for _ in range(50)]
    assert max(draws) <= 4.0 and min(draws) >= 0.0 and len(set(draws)) > 10
    assert max(c._backoff(0, None) for _ in range(200)) <= 1.0
    assert c._backoff(0, "100") == 4.0  # Retry-After capped


def test_slow_reply_times_out(api, tmp_path):
    _, url = api
    Api.fault = ["slow"] * 3
    with pytest.raises(Unavailable, match="timed out"):
        client(tmp_path, timeout=0.3, max_retries=1).get_json(url, {"list": "search"}, mediawiki=True)


@pytest.mark.parametrize("fault,match", [("truncated", "did not answer JSON"), ("html", "HTTP 502"),
                                         ("apierror", "API error badvalue: Unrecognized value"),
                                         ("html200", "did not answer JSON")])
def test_malformed_replies_are_typed_errors(api, tmp_path, fault, match):
    _, url = api
    Api.fault = [fault]
    with pytest.raises(BadResponse, match=match):
        client(tmp_path).get_json(url, {"list": "search", "srsearch": "x"}, mediawiki=True)


@pytest.mark.parametrize("fault,match", [("huge", "body of 200009 bytes exceeds the 1000-byte bound"),
                                         ("huge_nolength", "body exceeds the 1000-byte bound")])
def test_oversized_body_bounded(api, tmp_path, fault, match):
    _, url = api
    Api.fault = [fault]
    with pytest.raises(TooLarge, match=match):
        client(tmp_path, max_bytes=1000).get_json(url, {"list": "search"}, mediawiki=True)


def test_per_host_concurrency_limit(api, tmp_path):
    _, url = api
    c = client(tmp_path, per_host_concurrency=1, mode="record")
    active, peak = [0], [0]
    lock = threading.Lock()
    original = c._session.send

    def counting_send(*a, **kw):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            time.sleep(0.05)
            return original(*a, **kw)
        finally:
            with lock:
                active[0] -= 1

    c._session.send = counting_send
    threads = [threading.Thread(target=c.get_json, args=(url, {"list": "search", "srsearch": str(i)}),
                                kwargs={"mediawiki": True}) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 1 and len(Api.log) == 4


def test_record_then_replay_with_server_stopped(api, tmp_path):
    server, url = api
    recorded = WikipediaSource(client(tmp_path, mode="record"), url)
    first = (leads(recorded, "Melville", k=2), [p.text for p in recorded.page("Moby Dick")])
    n_live = len(Api.log)
    assert n_live == 4
    server.shutdown()
    server.server_close()
    replay_client = client(tmp_path, mode="replay")
    replayed = WikipediaSource(replay_client, url)
    second = (leads(replayed, "Melville", k=2), [p.text for p in replayed.page("Moby Dick")])
    assert second == first
    assert replay_client.network_requests == 0 and len(Api.log) == n_live
    with pytest.raises(NotInCache, match="not in the recorded cache"):
        replayed.search_titles("Ahab")
    with pytest.raises(NotInCache):
        replay_client.get_json(url, {"list": "search", "srsearch": "Ahab"}, mediawiki=True)


def test_live_mode_uses_cache_before_network(api, tmp_path):
    _, url = api
    c = client(tmp_path)
    WikipediaSource(c, url).lead("Moby-Dick")
    WikipediaSource(c, url).lead("Moby-Dick")
    assert len(Api.log) == 1 and c.cache_hits == 1


def test_cache_export_import_round_trip(api, tmp_path):
    _, url = api
    leads(WikipediaSource(client(tmp_path, mode="record"), url), "Melville", k=2)
    stats = cache_stats(tmp_path / "cache.sqlite")
    assert stats["responses"] == 3 and list(stats["hosts"]) == [urlparse(url).netloc]
    out = tmp_path / "export.jsonl"
    assert cache_export(tmp_path / "cache.sqlite", out) == 3
    other = tmp_path / "other"
    other.mkdir()
    assert cache_import(other / "cache.sqlite", out) == 3
    replayed = leads(WikipediaSource(client(other, mode="replay"), url), "Melville", k=2)
    assert replayed[0][0] == "Moby-Dick"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    with pytest.raises(BadResponse, match="bad.jsonl:1: not an exported cache record"):
        cache_import(other / "cache.sqlite", bad)


def test_cli_cache_stats_export_import(api, tmp_path):
    import os
    import subprocess
    import sys

    _, url = api
    WikipediaSource(client(tmp_path, mode="record"), url).lead("Moby-Dick")

    def hqa(*argv, cache):
        env = dict(os.environ, HQA_HTTP__CACHE_PATH=str(cache), HQA_CONFIG=str(tmp_path / "none.toml"))
        (tmp_path / "none.toml").write_text("")
        return subprocess.run([sys.executable, "-m", "hqa.cli", "cache", *argv], env=env, capture_output=True,
                              text=True, timeout=120)

    stats = hqa("stats", "--json", cache=tmp_path / "cache.sqlite")
    assert stats.returncode == 0 and json.loads(stats.stdout)["responses"] == 1
    out = tmp_path / "ship.jsonl"
    assert hqa("export", str(out), cache=tmp_path / "cache.sqlite").returncode == 0
    imported = hqa("import", str(out), cache=tmp_path / "new" / "c.sqlite")
    assert imported.returncode == 0 and "imported 1 responses" in imported.stdout
    assert json.loads(hqa("stats", "--json", cache=tmp_path / "new" / "c.sqlite").stdout)["responses"] == 1
    missing = hqa("stats", cache=tmp_path / "absent.sqlite")
    assert missing.returncode == 2 and missing.stderr.startswith("hqa: error: no HTTP cache at")


def test_retry_after_as_http_date_is_parsed_and_a_far_one_is_an_outage(api, tmp_path):
    """An HTTP-date Retry-After is parsed (urllib3); one decades away is past http.retry_after_cap, so the request
    fails at once as an outage observation instead of sleeping (issue 40)."""
    _, url = api
    Api.fault = ["429date"]
    sleeps: list[float] = []
    with pytest.raises(Unavailable, match="beyond the 60s cap"):
        client(tmp_path, sleeps=sleeps, backoff_cap=7.0).get_json(url, {"list": "search", "srsearch": "x"},
                                                                  mediawiki=True)
    assert sleeps == [] and len(Api.log) == 1


def test_record_always_asks_the_origin_and_live_reads_the_recording(api, tmp_path):
    _, url = api
    params = {"list": "search", "srsearch": "Melville"}
    recorder = client(tmp_path, mode="record")
    first = recorder.get_json(url, params, mediawiki=True)
    assert recorder.get_json(url, params, mediawiki=True) == first and recorder.cache_hits == 0
    assert len(Api.log) == 2 and all(r["cache_control"] == "no-cache" for r in Api.log)
    live = client(tmp_path)
    assert live.get_json(url, params, mediawiki=True) == first and live.cache_hits == 1 and len(Api.log) == 2


def test_maxlag_object_is_never_recorded(api, tmp_path):
    _, url = api
    Api.fault = ["maxlag200"]
    with pytest.raises(Unavailable, match=r"HTTP 200 \(maxlag\); gave up after 1 attempt$"):
        client(tmp_path, max_retries=0).get_json(url, {"list": "search", "srsearch": "Melville"}, mediawiki=True)
    assert cache_stats(tmp_path / "cache.sqlite")["responses"] == 0
    again = client(tmp_path).get_json(url, {"list": "search", "srsearch": "Melville"}, mediawiki=True)
    assert again["query"]["search"][0]["title"] == "Moby-Dick" and len(Api.log) == 2


def test_replay_miss_without_a_cache_file_creates_none(tmp_path):
    with pytest.raises(NotInCache, match="not in the recorded cache"):
        client(tmp_path, mode="replay").get_json("http://127.0.0.1:9/w/api.php", {"list": "search"}, mediawiki=True)
    assert list(tmp_path.iterdir()) == []


def test_cache_hits_do_not_take_the_per_host_limit(api, tmp_path):
    _, url = api
    params = {"list": "search", "srsearch": "Melville"}
    first = client(tmp_path, mode="record").get_json(url, params, mediawiki=True)

    class Taken:  # the per-host limit bounds network requests only
        def __enter__(self):
            raise AssertionError("a cache hit waited for the per-host network limit")

        def __exit__(self, *exc):
            return False

    for mode in ("live", "replay"):
        c = client(tmp_path, mode=mode)
        c._host_limits[urlparse(url).netloc] = Taken()
        assert c.get_json(url, params, mediawiki=True) == first and c.cache_hits == 1
