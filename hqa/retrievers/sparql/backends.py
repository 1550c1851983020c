"""The KG's SPARQL backends: the embedded Oxigraph store and any SPARQL 1.1 HTTP endpoint, behind one ``run``.

``run(query)`` is the same for both (:class:`SparqlStore`): the read-only guard (:func:`~hqa.retrievers.sparql.guard.
prepare_query`) checks and normalises the query, the backend executes it (``_execute``: the store in a worker
process, the endpoint over the live sources' HTTP layer) into ``{"boolean"}`` | ``{"rows", "variables",
"truncated"}`` | ``{"error"}``, and that becomes a :class:`~hqa.retrievers.base.SparqlResult`; a rejected query, a
timeout, an outage or a malformed reply is the result's ``error`` — an observation, never an exception.
"""

from __future__ import annotations

import contextvars
import json
import re
import time
from pathlib import Path
from typing import Any

from hqa.data import wikidata as W
from hqa.errors import EndpointError, PackMissingError, QueryRejected
from hqa.retrievers.base import SparqlResult
from hqa.retrievers.sparql.guard import LABELS, PING, parse_deadline, prepare_query
from hqa.retrievers.sparql.pool import MAX_RESPONSE_BYTES, IsolatedStore
from hqa.retrievers.sparql.worker import materialise


class Failed(Exception):
    """A query the backend could not run: ``str(self)`` is the result's error; ``unavailable`` when the backend
    itself could not be reached (an infrastructure fault, not the query's)."""

    def __init__(self, error: str, unavailable: bool = False):
        super().__init__(error)
        self.unavailable = unavailable


_LABEL_ID = re.compile(r"[QP]\d+")
#: when the running query must be done (parse included): the embedded store's worker gets what the parse left
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("hqa_sparql_deadline", default=None)
#: set while :meth:`HttpSparql.ping` runs: only a trivial query's silence says the endpoint is down
_PINGING: contextvars.ContextVar[bool] = contextvars.ContextVar("hqa_sparql_pinging", default=False)


class SparqlStore:
    """What the backends share: the guarded ``run``, ``labels`` through label queries, ``ping``."""

    name = ""
    limit = 100
    local_labels = True  # rewrite the Wikidata label service into rdfs:label patterns (a store without the service)

    def __init__(self) -> None:
        self._label_cache: dict[str, str] = {}

    def where(self) -> str:
        """The backend as an error message names it."""
        raise NotImplementedError

    def refuse(self, form: str) -> str | None:
        """Why a query of this form cannot run here, or None."""
        return None

    def _execute(self, full: str) -> dict[str, Any]:
        """Run a guarded query; its materialised result, or :class:`Failed`."""
        raise NotImplementedError

    def run(self, query: str) -> SparqlResult:
        start = time.monotonic()
        timeout = getattr(self, "timeout", None)
        try:
            with parse_deadline(timeout):  # the parse counts against the query's timeout too
                form, full = prepare_query(query, self.limit, local_labels=self.local_labels)
        except QueryRejected as exc:
            return SparqlResult(query=str(query)[:2000], error=str(exc))
        refused = self.refuse(form)
        if refused:
            return SparqlResult(query=query, error=refused)
        token = _DEADLINE.set(start + timeout if timeout else None)
        try:
            data = self._execute(full)
        except Failed as exc:
            return SparqlResult(query=query, error=str(exc), elapsed_ms=(time.monotonic() - start) * 1000,
                                unavailable=exc.unavailable)
        finally:
            _DEADLINE.reset(token)
        elapsed = (time.monotonic() - start) * 1000
        if "error" in data:
            return SparqlResult(query=query, error=str(data["error"]), elapsed_ms=elapsed)
        if "boolean" in data:
            return SparqlResult(query=query, boolean=bool(data["boolean"]), elapsed_ms=elapsed)
        return SparqlResult(query=query, rows=data["rows"], truncated=bool(data["truncated"]),
                            variables=list(data["variables"]), elapsed_ms=elapsed)

    def ping(self) -> None:
        res = self.run(PING)
        if res.error:
            raise EndpointError(f"{self.where()} is not usable: {res.error}")

    def labels(self, ids: list[str]) -> dict[str, str]:
        """English labels for Q/P ids (others are skipped: they have no label to ask for), asked once per backend
        with one :data:`~hqa.retrievers.sparql.guard.LABELS` query per 50 ids, and remembered here."""
        ids = [x for x in (x.strip() for x in ids) if _LABEL_ID.fullmatch(x)]
        out = {x: self._label_cache[x] for x in ids if x in self._label_cache}
        wanted = [x for x in ids if x not in self._label_cache]
        for chunk in range(0, len(wanted), 50):
            values = " ".join(f"wd:{x}" if x.startswith("Q") else f"wdt:{x} wd:{x}" for x in wanted[chunk: chunk + 50])
            for row in self.run(LABELS.format(values=values)).rows:
                lid = W.local_id(row.get("e", ""))
                if lid and lid not in out:
                    out[lid] = self._label_cache[lid] = row.get("l", "")
        return out


class OxigraphSparql(SparqlStore):
    """SPARQL over the on-disk Oxigraph store of the knowledge pack (opened read-only).

    With ``isolate`` (the default) every query runs in a worker process under a ``memory_mb`` address-space bound
    and is stopped after ``timeout`` seconds by killing the worker; ``isolate=False`` runs queries in this process
    (no bound on a query that never yields a row; kept as the baseline of ``benchmarks/bench_sparql_isolation.py``).
    """

    name = "oxigraph"

    def __init__(self, path: str | Path, timeout: float = 10.0, limit: int = 100, memory_mb: int = 1024,
                 isolate: bool = True):
        super().__init__()
        path = Path(path)
        if not path.is_dir():
            raise PackMissingError(f"Oxigraph store not found at {path}; run: hqa pack build")
        self.path, self.timeout, self.limit, self.memory_mb, self.isolate = path, timeout, limit, memory_mb, isolate
        if isolate:
            self.store: Any = IsolatedStore(path, timeout, limit, memory_mb)
        else:
            import pyoxigraph as ox

            try:
                self.store = ox.Store.read_only(str(path))
            except OSError as exc:
                raise PackMissingError(f"cannot open Oxigraph store at {path}: {exc}") from None

    def close(self) -> None:
        if isinstance(self.store, IsolatedStore):
            self.store.close()

    def where(self) -> str:
        return f"Oxigraph store at {self.path}"

    def _execute(self, full: str) -> dict[str, Any]:
        result = None
        try:
            bound = {"deadline": _DEADLINE.get()} if isinstance(self.store, IsolatedStore) else {}
            result = self.store.query(full, use_default_graph_as_union=True, **bound)
            return result if isinstance(result, dict) else materialise(result, self.limit)
        except TimeoutError:
            raise Failed(f"query timed out after {self.timeout:g}s") from None
        except MemoryError:
            raise Failed(f"query exceeded the memory bound ({self.memory_mb} MB)") from None
        except (SyntaxError, ValueError, OSError) as exc:
            raise Failed(f"{type(exc).__name__}: {exc}") from None
        finally:
            # in-process (isolate=False), pyoxigraph's result iterators may only be dropped by the thread that made
            # them (a server thread pool would otherwise report "unsendable ... dropped on another thread")
            del result


class HttpSparql(SparqlStore):
    """Any SPARQL 1.1 endpoint over HTTP (Wikidata Query Service, QLever, Virtuoso, ``oxigraph serve``).

    Transport is the live sources' HTTP layer (:mod:`hqa.retrievers.http`): the configured User-Agent, retries with jittered
    exponential backoff and ``Retry-After``, a per-host concurrency limit, a wall-clock bound per try, a body-size
    bound and — when a cache mode is set — record/replay through the shared SQLite cache.  Without a client the
    endpoint is reached directly (cache mode ``off``).  SPARQLWrapper is not used: it opens its own connections
    with ``urllib.request.urlopen``, so its requests would bypass that cache, the retries and the bounds, and what it
    would add here (the GET/POST choice and the JSON decode) is a few lines.
    """

    name = "sparql"
    local_labels = False  # the endpoint runs the label service itself
    ACCEPT = "application/sparql-results+json"
    MAX_GET_CHARS = 6000  # longer queries are sent as a form POST (WDQS and the others accept both)

    def __init__(self, endpoint: str, timeout: float = 10.0, limit: int = 100, user_agent: str = "hqa/0.1",
                 retries: int = 2, backoff: float = 0.5, client: Any = None):
        from hqa.config import HTTPConfig
        from hqa.retrievers.http import HTTPClient

        super().__init__()
        self.endpoint, self.timeout, self.limit, self.user_agent = endpoint, timeout, limit, user_agent
        self.client = client if client is not None else HTTPClient(HTTPConfig(  # ``retries`` for every failure
            cache_mode="off", user_agent=user_agent, timeout=timeout, max_retries=retries, timeout_retries=retries,
            backoff_base=backoff, max_bytes=MAX_RESPONSE_BYTES))

    def where(self) -> str:
        return f"SPARQL endpoint {self.endpoint}"

    def ping(self) -> None:
        """As every store's; an endpoint that gives no answer to this trivial query within its tries is treated as
        down (``http.down_for``), so the question's queries fail at once.  A query's own timeout marks nothing: the
        query may be what is slow."""
        token = _PINGING.set(True)
        try:
            super().ping()
        finally:
            _PINGING.reset(token)

    def refuse(self, form: str) -> str | None:
        if form in ("CONSTRUCT", "DESCRIBE"):  # these reply in an RDF syntax, not SPARQL JSON results
            return f"{form} is not supported over HTTP; use SELECT or ASK"
        return None

    def _request(self, full: str) -> Any:
        from hqa.retrievers.http import BadResponse, NotInCache, TooLarge, Unavailable

        form = len(full) > self.MAX_GET_CHARS
        try:
            body = self.client.get_bytes(self.endpoint, None if form else {"query": full},
                                         data={"query": full} if form else None, headers={"Accept": self.ACCEPT},
                                         judge_host=_PINGING.get())
        except NotInCache as exc:
            raise EndpointError(str(exc)) from None
        except Unavailable as exc:
            tries = f" after {exc.attempts} tr{'ies' if exc.attempts > 1 else 'y'}" if exc.attempts else ""
            raise EndpointError(f"SPARQL endpoint {self.endpoint} unreachable{tries}: {str(exc)[:300]}") from None
        except TooLarge as exc:
            raise EndpointError(f"SPARQL endpoint {self.endpoint} sent too much: {exc}") from None
        except BadResponse as exc:
            if exc.status == 400:
                raise ValueError(f"endpoint rejected the query: {exc.body_head}") from None
            if exc.status == 404:
                raise EndpointError(f"SPARQL endpoint {self.endpoint} not found (HTTP 404)") from None
            raise EndpointError(f"SPARQL endpoint {self.endpoint} refused the request: {str(exc)[:300]}") from None
        try:
            return json.loads(body.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise EndpointError(f"SPARQL endpoint {self.endpoint} returned garbage: {str(exc)[:200]}") from None

    def _execute(self, full: str) -> dict[str, Any]:
        try:
            data = self._request(full)
        except EndpointError as exc:
            raise Failed(str(exc), unavailable=True) from None
        except ValueError as exc:
            raise Failed(str(exc)) from None
        if not isinstance(data, dict):
            return {"error": "endpoint returned a non-JSON result"}
        if "boolean" in data:
            return {"boolean": data["boolean"]}
        try:
            variables = list(data.get("head", {}).get("vars", []))
            bindings = data["results"]["bindings"]
            rows = [{k: str(v.get("value", "")) for k, v in b.items()} for b in bindings[: self.limit]]
        except (KeyError, TypeError, AttributeError):
            return {"error": "endpoint returned malformed SPARQL JSON"}
        return {"rows": rows, "variables": variables, "truncated": len(bindings) > self.limit}


__all__ = ["HttpSparql", "OxigraphSparql", "SparqlStore"]
