"""Loopback stand-ins of the live services over a knowledge pack, speaking their real response formats.

* MediaWiki Action API ``list=search`` / ``prop=extracts`` (formatversion=2) and ``prop=pageprops&ppprop=
  wikibase_item``; pages = the pack's passages grouped by title, a page's item from the pack's title map;
* Wikibase ``wbsearchentities`` → ``{"searchinfo", "search": [{"id", "label", "description", "match": {"type",
  "language", "text"}}], "success": 1}`` and ``wbgetentities`` → ``{"entities": {"Q1": {"id", "labels": {"en":
  {"language", "value"}}, "descriptions": …, "aliases": …}}, "success": 1}``, ``"missing": ""`` for unknown ids,
  and ``sites``/``titles`` lookups (https://www.wikidata.org/w/api.php?action=help&modules=wbgetentities);
* ``/sparql``: a logging pass-through to a SPARQL endpoint (e.g. ``oxigraph serve-read-only`` over the pack's store),
  so the User-Agent and the queries reaching the SPARQL side are seen.

Used by the tests and ``benchmarks/bench_live.py`` to run the programs in live mode on a machine without internet;
``Api.fault`` injects 503-maxlag and HTML-error replies.  Loopback only.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

from hqa.data.jsonl import read_jsonl


class World:
    """The pack as the three live services see it."""

    def __init__(self, pack: Path):
        self.pages: dict[str, str] = defaultdict(str)
        for p in read_jsonl(pack / "passages.jsonl"):
            title = str(p.get("title") or "").strip()
            if title:
                self.pages[title] = (self.pages[title] + "\n" + str(p.get("text") or "")).strip()
        self.entities = {e["id"]: e for e in read_jsonl(pack / "entities.jsonl") if str(e.get("id", ""))[:1] in "QP"}
        self.by_label: dict[str, list[str]] = defaultdict(list)
        for e in self.entities.values():
            if e["id"].startswith("Q") and e.get("label"):
                self.by_label[e["label"].casefold()].append(e["id"])
        # a page's Wikidata item (pageprops.wikibase_item): the pack's title map, else a unique exact label
        titles = pack / "titles.jsonl"
        self.items = {r["title"].casefold(): r["qid"] for r in read_jsonl(titles)} if titles.exists() else {}

    def item(self, title: str) -> str | None:
        key = title.casefold()
        ids = self.by_label.get(key, [])
        return self.items.get(key) or (ids[0] if len(ids) == 1 else None)

    def search(self, text: str, limit: int) -> list[str]:
        words = [w for w in text.casefold().split() if len(w) > 2]
        scored = []
        for title, body in self.pages.items():
            hay = (title + " " + body).casefold()
            score = sum(hay.count(w) for w in words) + 5 * sum(w in title.casefold() for w in words)
            if score:
                scored.append((-score, title))
        return [t for _s, t in sorted(scored)[:limit]]

    def wbsearch(self, text: str, limit: int) -> list[dict]:
        key = text.casefold().strip()
        ids = list(self.by_label.get(key, []))
        ids += sorted((i for label, group in self.by_label.items() if label.startswith(key) and label != key
                       for i in group), key=lambda i: int(i[1:]))
        out = []
        for qid in ids[:limit]:
            e = self.entities[qid]
            hit = {"id": qid, "title": qid, "pageid": int(qid[1:]), "concepturi": f"http://www.wikidata.org/entity/{qid}",
                   "repository": "wikidata", "url": f"//www.wikidata.org/wiki/{qid}",
                   "display": {"label": {"value": e["label"], "language": "en"}},
                   "label": e["label"], "match": {"type": "label", "language": "en", "text": e["label"]}}
            if e.get("description"):
                hit["description"] = e["description"]
                hit["display"]["description"] = {"value": e["description"], "language": "en"}
            out.append(hit)
        return out

    def wbget(self, ids: list[str]) -> dict:
        out = {}
        for qid in ids:
            e = self.entities.get(qid)
            if e is None:
                out[qid] = {"id": qid, "missing": ""}
                continue
            ent = {"type": "item" if qid.startswith("Q") else "property", "id": qid, "labels": {}, "descriptions": {},
                   "aliases": {}}
            if e.get("label"):
                ent["labels"]["en"] = {"language": "en", "value": e["label"]}
            if e.get("description"):
                ent["descriptions"]["en"] = {"language": "en", "value": e["description"]}
            out[qid] = ent
        return out


class Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    world: World
    sparql_url = ""
    log: list = []
    fault: list = []  # consumed one per API request: "maxlag", "html"

    def log_message(self, *args):
        pass

    def _send(self, code: int, body: bytes, ctype: str = "application/json; charset=utf-8", headers=None):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, obj) -> None:
        self._send(200, json.dumps(obj).encode())

    def do_GET(self):
        url = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        type(self).log.append({"path": url.path, "params": q, "ua": self.headers.get("User-Agent"),
                               "accept": self.headers.get("Accept")})
        if url.path == "/sparql":
            req = urllib.request.Request(type(self).sparql_url + "?" + urlencode({"query": q.get("query", "")}),
                                         headers={"Accept": self.headers.get("Accept") or "*/*"})
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return self._send(resp.status, resp.read(), resp.headers.get("Content-Type", ""))
            except urllib.error.HTTPError as exc:
                return self._send(exc.code, exc.read(), "text/plain")
        fault = type(self).fault.pop(0) if type(self).fault else None
        if fault == "maxlag":
            err = {"error": {"code": "maxlag", "info": "Waiting for a database server: 7 seconds lagged."}}
            return self._send(503, json.dumps(err).encode(), headers={"Retry-After": "1"})
        if fault == "html":
            return self._send(502, b"<!DOCTYPE html><html><body>Bad Gateway</body></html>", "text/html")
        w = type(self).world
        action = q.get("action")
        if action == "wbsearchentities":
            hits = w.wbsearch(q.get("search", ""), int(q.get("limit", "7")))
            return self._json({"searchinfo": {"search": q.get("search", "")}, "search": hits, "success": 1})
        if action == "wbgetentities":
            if "ids" in q:
                return self._json({"entities": w.wbget(q["ids"].split("|")), "success": 1})
            title = q.get("titles", "")
            ids = w.by_label.get(title.casefold(), [])
            ents = w.wbget(ids[:1]) if ids else {"-1": {"site": q.get("sites"), "title": title, "missing": ""}}
            return self._json({"entities": ents, "success": 1})
        if action == "query" and q.get("list") == "search":
            titles = w.search(q.get("srsearch", ""), int(q.get("srlimit", "10")))
            return self._json({"batchcomplete": True, "query": {"searchinfo": {"totalhits": len(titles)}, "search": [
                {"ns": 0, "title": t, "pageid": i + 1} for i, t in enumerate(titles)]}})
        if action == "query" and q.get("prop") == "pageprops":  # formatversion 1, as HumanIQ's request gets it
            title = q.get("titles", "")
            item = w.item(title)
            if title not in w.pages and item is None:
                return self._json({"batchcomplete": "", "query": {"pages": {"-1": {"ns": 0, "title": title,
                                                                                  "missing": ""}}}})
            page = {"pageid": 1, "ns": 0, "title": title}
            if item:
                page["pageprops"] = {"wikibase_item": item}
            return self._json({"batchcomplete": "", "query": {"pages": {"1": page}}})
        if action == "query" and q.get("prop") == "extracts":
            title = q.get("titles", "")
            page = w.pages.get(title)
            if page is None:
                return self._json({"batchcomplete": True, "query": {"pages": [{"ns": 0, "title": title,
                                                                               "missing": True}]}})
            text = page.split("\n")[0] if "exintro" in q else page
            return self._json({"batchcomplete": True, "query": {"pages": [{"pageid": 1, "ns": 0, "title": title,
                                                                           "extract": text}]}})
        return self._send(400, json.dumps({"error": {"code": "badvalue", "info": "unknown"}}).encode())


def serve(pack: Path, sparql_url: str) -> tuple[ThreadingHTTPServer, str]:
    """Start the stand-in on 127.0.0.1 (a daemon thread); returns the server and its base URL."""
    Api.world, Api.sparql_url, Api.log, Api.fault = World(pack), sparql_url, [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
