"""Text source ``wikipedia``: any MediaWiki Action API endpoint through :mod:`hqa.retrievers.http`, and the *pages* the agent's
text tools see on every source kind.

Search is ``action=query&list=search``; summaries are ``prop=extracts&exintro&explaintext`` and full pages
``prop=extracts&explaintext``, both with ``redirects=1``; a page's Wikidata item is ``prop=pageprops&
ppprop=wikibase_item`` (the requests HumanIQ's tools send, NIMI-research/Hybrid-QA ``app/Tools/Tool.py``:
``WikiTool.get_wikidata_id`` and LangChain's ``WikipediaAPIWrapper``); the agent's tools
(:mod:`hqa.programs.humaniq_tools`) show them as the "Page: …\\nSummary: …" observations of the HumanIQ traces.

The toolbox's :attr:`~hqa.toolbox.Toolbox.agent_pages` give the agent's tools one interface over the three source
kinds — ``search_pages(query, k)`` (page titles, best first), ``lead(title)``, ``full_text(title)``, ``qids(titles)``
(each title's Wikidata item or None): :class:`WikipediaSource` (live, ``text.kind = wikipedia``),
:class:`PassagePages` (the knowledge pack or a JSONL corpus) and :class:`WorldPages` (a world's passage store).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hqa.data.jsonl import read_jsonl
from hqa.errors import HQAError
from hqa.retrievers.base import Evidence, Hits
from hqa.retrievers.embedding.encoders import embed
from hqa.retrievers.http import HTTPClient, HTTPFailure


@dataclass(frozen=True)
class WikiPassage:
    title: str
    text: str
    index: int


def split_passages(title: str, text: str, max_chars: int = 600) -> list[WikiPassage]:
    """Split a plain-text page into paragraph-aligned passages of at most ~``max_chars`` characters."""
    out: list[WikiPassage] = []
    buf = ""
    for para in (p.strip() for p in text.split("\n")):
        if not para or para.startswith("=="):
            continue
        if buf and len(buf) + 1 + len(para) > max_chars:
            out.append(WikiPassage(title, buf, len(out)))
            buf = ""
        buf = f"{buf} {para}".strip()
        while len(buf) > max_chars:
            cut = buf.rfind(". ", 0, max_chars)
            cut = cut + 1 if cut > 0 else max_chars
            out.append(WikiPassage(title, buf[:cut].strip(), len(out)))
            buf = buf[cut:].strip()
    if buf:
        out.append(WikiPassage(title, buf, len(out)))
    return out


class WikipediaSource:
    """Search, summaries and pages from ``api`` (e.g. https://en.wikipedia.org/w/api.php)."""

    def __init__(self, client: HTTPClient, api: str = "https://en.wikipedia.org/w/api.php") -> None:
        self.client, self.api = client, api

    def search_titles(self, query: str, k: int = 3) -> list[str]:
        data = self.client.get_json(self.api, {"action": "query", "list": "search", "srsearch": query,
                                               "srlimit": str(k), "srprop": ""}, mediawiki=True)
        return [hit["title"] for hit in data.get("query", {}).get("search", [])][:k]

    def _extract(self, title: str, intro: bool) -> tuple[str, str] | None:
        params = {"action": "query", "prop": "extracts", "explaintext": "1", "redirects": "1", "titles": title}
        if intro:
            params["exintro"] = "1"
        pages = self.client.get_json(self.api, params, mediawiki=True).get("query", {}).get("pages", [])
        found = ((p["title"], p["extract"].strip()) for p in pages if not p.get("missing") and "extract" in p)
        return next(found, None)

    def page(self, title: str) -> list[WikiPassage]:
        found = self._extract(title, intro=False)
        return [] if found is None else split_passages(*found)

    # -- the page interface of the agent's text tools (see the module docstring) ----------------------------------
    search_pages = search_titles

    def lead(self, title: str) -> tuple[str, str] | None:
        return self._extract(title, intro=True)

    def full_text(self, title: str) -> tuple[str, str] | None:
        return self._extract(title, intro=False)

    def qids(self, titles: list[str]) -> dict[str, str | None]:
        """Each title's Wikidata item: ``prop=pageprops&ppprop=wikibase_item``, one request per title as HumanIQ's
        ``get_wikidata_id`` sends it (no redirect following); None when the page has none or does not exist."""
        out: dict[str, str | None] = {}
        for title in titles:
            data = self.client.get_json(self.api, {"action": "query", "prop": "pageprops", "ppprop": "wikibase_item",
                                                   "titles": title}, mediawiki=True)
            pages = (data.get("query") or {}).get("pages") or []
            pages = list(pages.values()) if isinstance(pages, dict) else pages
            item = next((p.get("pageprops", {}).get("wikibase_item") for p in pages if isinstance(p, dict)), None)
            out[title] = item if isinstance(item, str) and item.startswith("Q") else None
        return out


class WikipediaText:
    """The text retriever of ``text.kind = wikipedia``: search → the top pages' plain text split into passages →
    the passages ranked by embedding similarity to the query (DETLLM's dense step over what the search returned)."""

    pages = 3  # top search hits read
    passages_per_page = 20

    def __init__(self, source: WikipediaSource, embedder: str | None = None) -> None:
        self.source, self.embedder = source, embedder

    def __call__(self, query: str, k: int = 5) -> Hits:
        try:
            titles = self.source.search_titles(query, self.pages)
            passages = [p for t in titles for p in self.source.page(t)[: self.passages_per_page]]
        except HTTPFailure as exc:
            return Hits(error=f"Wikipedia unavailable: {exc}")
        if not passages:
            return Hits()
        vecs = embed([query] + [f"{p.title}: {p.text}" for p in passages], self.embedder)
        scores = vecs[1:] @ vecs[0]
        order = sorted(range(len(passages)), key=lambda i: (-float(scores[i]), i))[:k]
        return Hits(Evidence(text=passages[i].text, source="text", score=float(scores[i]),
                             meta={"id": f"{passages[i].title}#{passages[i].index}", "title": passages[i].title})
                    for i in order)


def title_match(query: str, title: str) -> int:
    """0 when ``title`` is the query (up to case, a leading article and punctuation), 1 when it is so once its
    trailing disambiguation is dropped (``Riverdale (American TV series)``), else 2: the order in which a Wikipedia
    search puts pages whose title is what was searched for first, and the main article before its namesakes."""
    def norm(text: str) -> str:
        text = re.sub(r"[^\w\s]", " ", text.casefold())
        return " ".join(w for i, w in enumerate(text.split()) if i or w not in ("the", "a", "an"))

    q = norm(query)
    if norm(title) == q:
        return 0
    return 1 if norm(re.sub(r"\s*\([^)]*\)\s*$", "", title)) == q else 2


class PassagePages:
    """Pages over a passage list (the pack's ``passages.jsonl`` or a JSONL corpus): a page is a title, its lead the
    title's first passage (the recorded summary), its text all of them in order; search ranks passages with ``dense``
    and keeps distinct titles; ``titles`` is the title→QID map (the pack's ``titles.jsonl``: the page titles the
    recorded ``GetWikidataID`` calls mapped; casefolded keys), ``linker`` the fallback for unmapped titles (its
    exact-label match, :meth:`hqa.retrievers.linking.entities.EntityLinker.title_to_qid`)."""

    def __init__(self, passages: list[dict], dense, titles: dict[str, str] | None = None, linker=None):
        self.by_title: dict[str, list[dict]] = {}
        for p in passages:
            title = str(p.get("title") or "").strip()
            if title:
                self.by_title.setdefault(title.casefold(), []).append(p)
        self.dense = dense
        self.titles = {str(t).casefold(): q for t, q in (titles or {}).items()}
        self.linker = linker

    def search_pages(self, query: str, k: int = 3) -> list[str]:
        hits = self.dense(query, k=max(4 * k, 10))
        if not hits and getattr(hits, "error", None):
            raise LookupError(hits.error)  # no passages at all: the reason, never a silent "nothing found"
        titles = []
        for h in hits:
            title = str(h.meta.get("title") or "").strip()
            if title and title not in titles:
                titles.append(title)
                self._found(title, h)
        return sorted(titles, key=lambda t: title_match(query, t))[:k]  # stable: dense order within a class

    def _found(self, title: str, hit) -> None:
        if title.casefold() not in self.by_title:  # a retriever over another corpus (tests): its hit is the page
            self.by_title[title.casefold()] = [{"id": hit.meta.get("id"), "title": title, "text": hit.text}]

    def _passages(self, title: str) -> list[dict]:
        return self.by_title.get(str(title or "").strip().casefold(), [])

    def lead(self, title: str) -> tuple[str, str] | None:
        ps = self._passages(title)
        return (ps[0]["title"], str(ps[0].get("text") or "")) if ps else None

    def full_text(self, title: str) -> tuple[str, str] | None:
        ps = self._passages(title)
        return (ps[0]["title"], "\n".join(str(p.get("text") or "") for p in ps)) if ps else None

    def passage_ids(self, title: str) -> list[str]:
        return [str(p.get("id")) for p in self._passages(title)]

    def qids(self, titles: list[str]) -> dict[str, str | None]:
        def qid(title: str) -> str | None:  # the title→QID map, else the linker's label match
            found = self.titles.get(title.strip().casefold())
            return self.linker.title_to_qid(title) if found is None and self.linker is not None else found

        return {title: qid(title) for title in titles}


class WorldPages(PassagePages):
    """Pages over a world's passage store (:class:`hqa.retrievers.passage_store.TextWorld`); QIDs from the world's
    label store (a page title is an entity label in a Wikipedia-built world)."""

    def __init__(self, text_world, linker=None):
        self.text_world = text_world
        self.dense = text_world.dense
        self.titles = {}
        self.linker = linker

    def _found(self, title: str, hit) -> None:
        return None  # the world's store has every page

    def _passages(self, title: str) -> list[dict]:
        first = self.text_world.store.by_title(str(title or ""))
        if first is None:
            return []
        rows = self.text_world.store.by_rows(range(first["row"], first["row"] + 50))
        return [p for _r, p in sorted(rows.items()) if p["title"] == first["title"]]


def pack_titles(tb) -> dict[str, str]:
    """The pack's title→QID map (``titles.jsonl`` beside ``passages.jsonl``; empty for a pack built before it)."""
    if tb.settings.text.kind != "pack":
        return {}
    try:
        path = getattr(tb.world, "path", None)
    except HQAError:  # no pack (a toolbox whose passages were handed in): no map
        return {}
    file = Path(path) / "titles.jsonl" if path is not None else None
    return {r["title"]: r["qid"] for r in read_jsonl(file)} if file is not None and file.exists() else {}
