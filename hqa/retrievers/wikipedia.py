"""Text source ``wikipedia``: any MediaWiki Action API endpoint through :mod:`hqa.http`.

Search is ``action=query&list=search``; summaries are ``prop=extracts&exintro&explaintext`` and full pages
``prop=extracts&explaintext``, both with ``redirects=1``.  Observations use the "Page: …\\nSummary: …" form of the
HumanIQ traces; failures come back as one-line observations, never as exceptions or silent empty results.
"""

from __future__ import annotations

from dataclasses import dataclass

from hqa.http import HTTPClient, HTTPFailure


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
        self.client = client
        self.api = api

    def search_titles(self, query: str, k: int = 3) -> list[str]:
        data = self.client.get_json(
            self.api,
            {"action": "query", "list": "search", "srsearch": query, "srlimit": str(k), "srprop": ""},
            mediawiki=True,
        )
        return [hit["title"] for hit in data.get("query", {}).get("search", [])][:k]

    def _extract(self, title: str, intro: bool) -> tuple[str, str] | None:
        params = {"action": "query", "prop": "extracts", "explaintext": "1", "redirects": "1", "titles": title}
        if intro:
            params["exintro"] = "1"
        data = self.client.get_json(self.api, params, mediawiki=True)
        for page in data.get("query", {}).get("pages", []):
            if page.get("missing") or "extract" not in page:
                continue
            return page["title"], page["extract"].strip()
        return None

    def summary(self, title: str) -> str:
        try:
            found = self._extract(title, intro=True)
        except HTTPFailure as exc:
            return f"Wikipedia unavailable: {exc}"
        if found is None:
            return f"Page: {title}\nSummary: (no such page)"
        return f"Page: {found[0]}\nSummary: {found[1]}"

    def page(self, title: str) -> list[WikiPassage]:
        found = self._extract(title, intro=False)
        return [] if found is None else split_passages(*found)

    def search(self, query: str, k: int = 3) -> str:
        """The WikiSearch observation: a summary for each of the top ``k`` hits."""
        try:
            titles = self.search_titles(query, k)
        except HTTPFailure as exc:
            return f"Wikipedia unavailable: {exc}"
        if not titles:
            return f"Wikipedia search found no page for {query!r}."
        return "\n\n".join(self.summary(t) for t in titles)


class Hits(list):
    """Evidence found, plus ``error``: why the source could not answer (an outage is never a silent empty list)."""

    error: str | None = None


class WikipediaText:
    """The text retriever of ``text.kind = wikipedia``: search → the top pages' plain text split into passages →
    the passages ranked by embedding similarity to the query (DETLLM's dense step over what the search returned).
    ``read(title)`` is the agent's Read tool."""

    def __init__(self, source: WikipediaSource, embedder: str | None = None, pages: int = 3,
                 passages_per_page: int = 20) -> None:
        self.source = source
        self.embedder = embedder
        self.pages = pages
        self.passages_per_page = passages_per_page

    def __call__(self, query: str, k: int = 5) -> Hits:
        from hqa.retrievers.base import Evidence

        hits = Hits()
        try:
            titles = self.source.search_titles(query, self.pages)
            passages = [p for t in titles for p in self.source.page(t)[: self.passages_per_page]]
        except HTTPFailure as exc:
            hits.error = f"Wikipedia unavailable: {exc}"
            return hits
        if not passages:
            return hits
        from hqa.retrievers.embed import embed

        vecs = embed([query] + [f"{p.title}: {p.text}" for p in passages], self.embedder)
        scores = vecs[1:] @ vecs[0]
        order = sorted(range(len(passages)), key=lambda i: (-float(scores[i]), i))[:k]
        for i in order:
            p = passages[i]
            hits.append(Evidence(text=p.text, source="text", score=float(scores[i]),
                                 meta={"id": f"{p.title}#{p.index}", "title": p.title}))
        return hits

    def read(self, title: str, max_chars: int = 3000) -> str:
        try:
            passages = self.source.page(title)
        except HTTPFailure as exc:
            return f"Wikipedia unavailable: {exc}"
        if not passages:
            return f"No page titled {title!r}."
        text = ""
        for p in passages:
            if len(text) + len(p.text) > max_chars:
                break
            text = f"{text}\n{p.text}".strip()
        return f"Page: {passages[0].title}\n{text or passages[0].text[:max_chars]}"
