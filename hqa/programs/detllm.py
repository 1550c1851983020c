"""DETLLM — DIVKNOWQA's decompose–retrieve–answer system over text, KG triples and SPARQL.

For a multi-hop question, each hop is one LM call (:class:`~hqa.signatures.detllm.HopQuery`) that writes a
rationale, a text search query, the entity the sub-question is about and a Wikidata SPARQL query (or "None").
Retrieval then runs over three sources:

* dense passages for the search query (``toolbox.dense``),
* BM25 over linearized KG triples for ``search query + query entity`` (``toolbox.bm25``),
* the rows of the SPARQL query (``toolbox.sparql.run``; read-only checked, LIMITed, timed out; an error is an
  observation in the trace, never an exception).

The query entity is linked to Wikidata ids (``toolbox.linker.link``); the link is recorded and, when the SPARQL
query names exactly one entity the store cannot know (``wd:Gabon``, ``wd:ENTITY``, a QID missing from the local
pack), that reference is grounded to the top linked id.  The union of the three sources is deduplicated (also
against evidence kept at earlier hops), reranked with ``toolbox.reranker`` and the top-k items join the context of
the next hop.  After ``hops`` hops one final LM call (:class:`~hqa.signatures.detllm.HopAnswer`) answers.

So ``hops`` hops cost exactly ``hops + 1`` LM calls; with ``samples > 1`` every hop call is sampled ``samples``
times (temperature ``temperature``, distinct rollout ids) and all distinct queries are used: ``hops * samples + 1``.
The trace records both ``lm_calls`` (predictor calls) and ``lm_requests`` (requests the LM actually received,
counted by a thread-local callback, so an adapter's parse-failure retry shows up there).
Retrievers are never attributes: the program stores a toolbox *name*, so ``deepcopy``/``save`` never copy an index.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback
from dspy.utils.exceptions import AdapterParseError

from hqa.data import wikidata as W
from hqa.programs.common import clean_answer, new_trace
from hqa.retrievers.base import Evidence
from hqa.retrievers.registry import get_toolbox
from hqa.retrievers.sparql import SparqlResult, rows_as_evidence
from hqa.signatures.detllm import HopAnswer, HopQuery

_NONE_WORDS = {"", "none", "null", "nil", "n/a", "na", "no", "no query", "no sparql", "-", "unknown", "not needed",
               "not applicable"}
_FENCE_RE = re.compile(r"^\s*```[\w-]*\s*\n?(.*?)\n?\s*```\s*$", re.S)
_WD_REF_RE = re.compile(r"\bwd:([^\s{}()\[\].,;]+)")
_QID_ONLY_RE = re.compile(r"^Q\d+$")
RERANK_QUERIES = ("both", "question", "hop")


# ------------------------------------------------------------------------------------------------------------
# helpers (module level so the benchmark and other programs can reuse them)
# ------------------------------------------------------------------------------------------------------------
def clean_sparql(text: Any) -> str | None:
    """The LM's SPARQL field → a query string, or None when it says there is none (``None``, empty, ``N/A``)."""
    if text is None:
        return None
    text = str(text).strip()
    m = _FENCE_RE.match(text)
    if m:
        text = m.group(1).strip()
    if text.lower().startswith("sparql:"):
        text = text[len("sparql:"):].strip()
    if text.strip("\"'` .").lower() in _NONE_WORDS:
        return None
    return text


def _none_ish(text: Any) -> bool:
    return text is None or str(text).strip().strip("\"'` .").lower() in _NONE_WORDS


def ground_sparql(query: str, qid: str | None, known: set[str] | dict | None = None) -> tuple[str, str | None]:
    """Replace the one entity reference the store cannot resolve with the linked ``qid``.

    A reference is unresolvable when it is not a QID at all (``wd:Gabon``, ``wd:ENTITY``) or, when ``known`` (the
    ids a local store holds) is given, a QID outside it.  Only a query with exactly one distinct such reference is
    rewritten — with several, which one the link belongs to is a guess.  Returns ``(query, replaced_ref_or_None)``.
    """
    if not qid or not query:
        return query, None
    bad = []
    for m in _WD_REF_RE.finditer(query):
        ref = m.group(1)
        if not _QID_ONLY_RE.match(ref) or (known is not None and ref not in known):
            if ref not in bad:
                bad.append(ref)
    if len(bad) != 1 or bad[0] == qid:
        return query, None
    ref = bad[0]
    return re.sub(r"\bwd:" + re.escape(ref) + r"(?![\w-])", "wd:" + qid, query), ref


def _ev_key(e: Evidence) -> tuple:
    meta = e.meta or {}
    if e.source == "text" and meta.get("id") is not None:
        return ("text", str(meta["id"]))
    if e.source == "triples" and meta.get("s") and meta.get("p") and meta.get("o"):
        return ("triples", meta["s"], meta["p"], meta["o"])
    return (e.source, " ".join(e.text.split()).lower())


def _ev_dict(e: Evidence, hop: int) -> dict[str, Any]:
    d = e.to_dict()
    d["hop"] = hop
    return d


def _value_text(value: str, labels: dict[str, str]) -> str:
    lid = W.local_id(value)
    if lid:
        return labels.get(lid, lid)
    return value.split("T00:00:00")[0] if "T00:00:00" in value else value


def _result_ids(res: SparqlResult) -> list[str]:
    return sorted({lid for row in res.rows for v in row.values() if (lid := W.local_id(v))})


@dataclass
class HopPlan:
    """What one hop call wrote (one per sample)."""

    rationale: str = ""
    search_query: str = ""
    query_entity: str = ""
    sparql: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"rationale": self.rationale, "search_query": self.search_query, "query_entity": self.query_entity,
                "sparql": self.sparql, "error": self.error}


def _distinct(items) -> list:
    out = []
    for x in items:
        if x and x not in out:
            out.append(x)
    return out


def hop_retrieval(tb, question: str, plans: list[HopPlan], *, k: int = 5, k_per_source: int = 5,
                  exclude: set | None = None, rerank_query: str = "both", link_k: int = 3) -> dict[str, Any]:
    """The retrieval half of one hop (no LM): dense + BM25 + linked entity + SPARQL → dedupe → rerank → top-k.

    Returns a dict with ``kept`` (Evidence list), ``linked_entities``, ``sparql_results`` (SparqlResult list, in
    the order run), ``grounded`` (SPARQL references rewritten to linked ids), ``n_by_source``, ``passages``,
    ``triples``, ``tool_calls`` and ``retrieval_ms``.
    """
    t0 = time.perf_counter()
    exclude = exclude if exclude is not None else set()
    searches = _distinct((p.search_query or "").strip() for p in plans) or [question]
    pairs = _distinct(((p.search_query or "").strip() or question, (p.query_entity or "").strip()) for p in plans)
    mentions = _distinct((p.query_entity or "").strip() for p in plans if not _none_ish(p.query_entity))
    tool_calls: list[dict[str, Any]] = []

    # entity linking of the query entity (recorded; grounds unresolvable SPARQL entity references)
    linked: list[dict[str, Any]] = []
    top_qid: dict[str, str] = {}
    for mention in mentions:
        cands = tb.linker.link(mention, question, k=link_k)
        if cands:
            top_qid[mention] = cands[0].id
        linked.extend(c.to_dict() for c in cands)
        tool_calls.append({"tool": "link", "input": mention, "output": [c.id for c in cands]})

    # text: dense passages per distinct search query
    passages: list[Evidence] = []
    for q in searches:
        hits = tb.dense(q, k_per_source)
        got = list(hits)
        passages.extend(got)
        tool_calls.append({"tool": "dense", "input": q, "output": getattr(hits, "error", None) or len(got)})

    # triples: BM25 over linearized KG triples per distinct (search query, entity)
    triples: list[Evidence] = []
    for q, ent in pairs:
        bq = f"{q} {ent}".strip() if not _none_ish(ent) else q
        hits = tb.bm25(bq, k_per_source)
        got = list(hits)
        triples.extend(got)
        tool_calls.append({"tool": "bm25", "input": bq, "output": getattr(hits, "error", None) or len(got)})

    # sparql: the LM's queries, grounded with the linked entity where a reference cannot resolve
    kg_items: list[Evidence] = []
    results: list[SparqlResult] = []
    grounded: list[dict[str, str]] = []
    known = None
    settings = getattr(tb, "settings", None)
    if (settings is not None and getattr(getattr(settings, "kg", None), "kind", None) == "oxigraph"
            and getattr(getattr(settings, "linker", None), "kind", "pack") == "pack"):
        known = getattr(tb.linker, "entities", None)
    ran: set[str] = set()
    for p in plans:
        if not p.sparql:
            continue
        query = p.sparql
        qid = top_qid.get((p.query_entity or "").strip())
        query, replaced = ground_sparql(query, qid, known)
        if replaced:
            grounded.append({"from": replaced, "to": qid})
        if query in ran:
            continue
        ran.add(query)
        try:
            res = tb.sparql.run(query)
        except Exception as exc:  # untrusted LM SPARQL: a failure is an observation, never a crash
            res = SparqlResult(query=query, error=f"{type(exc).__name__}: {exc}")
        labels: dict[str, str] = {}
        if res.ok and res.rows:
            ids = _result_ids(res)
            if ids:
                try:
                    labels = tb.sparql.labels(ids)
                except Exception:  # labels are a nicety; rows stay usable as ids
                    labels = {}
        kg_items.extend(rows_as_evidence(res, labels))
        results.append(res)
        tool_calls.append({"tool": "sparql", "input": query,
                           "output": res.error if res.error else f"{len(res.rows) or (res.boolean is not None)} rows"})

    # union, dedupe (within the hop and against earlier hops), rerank, keep top-k
    pool: list[Evidence] = []
    seen = set(exclude)
    for e in passages + triples + kg_items:
        key = _ev_key(e)
        if key in seen:
            continue
        seen.add(key)
        pool.append(e)
    if rerank_query == "question":
        rq = question
    elif rerank_query == "hop":
        rq = " ".join(searches)
    else:
        rq = " ".join(_distinct([question] + searches))
    kept = list(tb.reranker.rerank(rq, pool, k)) if pool and k > 0 else []
    kept = kept[:k]
    tool_calls.append({"tool": "rerank", "input": rq, "output": len(kept)})
    return {
        "kept": kept,
        "linked_entities": linked,
        "sparql_results": results,
        "grounded": grounded,
        "n_by_source": {"text": len(passages), "triples": len(triples), "sparql": len(kg_items)},
        "n_pool": len(pool),
        "passages": passages,
        "triples": triples,
        "kg_items": kg_items,
        "tool_calls": tool_calls,
        "retrieval_ms": round((time.perf_counter() - t0) * 1000, 2),
    }


def _kg_answer(res: SparqlResult, labels_fn, max_values: int = 10) -> str | None:
    """Labels of a result's values (``yes``/``no`` for ASK), joined with `` | ``."""
    if not res.ok:
        return None
    if res.boolean is not None:
        return "yes" if res.boolean else "no"
    if not res.rows:
        return None
    labels: dict[str, str] = {}
    ids = _result_ids(res)
    if ids:
        try:
            labels = labels_fn(ids)
        except Exception:
            labels = {}
    # prefer the projection's non-label variables; skip ?xLabel companions when ?x is there
    vals = []
    for row in res.rows:
        keys = list(res.variables or row.keys())
        for v in keys:
            if v not in row:
                continue
            if v.endswith("Label") and v[: -len("Label")] in row:
                continue
            vals.append(_value_text(row[v], labels))
    vals = _distinct(vals)
    return " | ".join(vals[:max_values]) if vals else None


class _RequestCounter(BaseCallback):
    """Counts the LM requests actually issued (adapter retries included) inside one ``forward``.

    Installed with ``dspy.context(callbacks=...)``, which is thread-local: concurrent calls sharing an LM (as under
    ``dspy.Evaluate``) do not see each other's requests.
    """

    def __init__(self):
        self.n = 0

    def on_lm_start(self, call_id, instance, inputs):
        self.n += 1


# ------------------------------------------------------------------------------------------------------------
# the program
# ------------------------------------------------------------------------------------------------------------
class DETLLM(dspy.Module):
    """Decompose → retrieve (text, triples, SPARQL) → rerank, for ``hops`` hops; then answer.

    Predictors: ``hop1`` … ``hop{hops}`` (one per hop, so an optimizer gives each its own demos) and ``answer``.
    """

    #: per-call options (``hqa serve``'s ``options``): read at forward time (``hops`` is structure: one predictor per
    #: hop, so it is not one of them)
    runtime_options = {"k": (int, 1, 50), "k_per_source": (int, 1, 50)}

    def __init__(self, hops: int = 2, k: int = 5, k_per_source: int = 5, samples: int = 1,
                 temperature: float = 0.7, toolbox: str = "default", rerank_query: str = "both"):
        super().__init__()
        if int(hops) < 1:
            raise ValueError("hops must be >= 1")
        if int(samples) < 1:
            raise ValueError("samples must be >= 1")
        if rerank_query not in RERANK_QUERIES:
            raise ValueError(f"rerank_query must be one of {RERANK_QUERIES}")
        self.hops = int(hops)
        self.k = int(k)
        self.k_per_source = int(k_per_source)
        self.samples = int(samples)
        self.temperature = float(temperature)
        self.toolbox = toolbox
        self.rerank_query = rerank_query
        for i in range(1, self.hops + 1):
            setattr(self, f"hop{i}", dspy.Predict(HopQuery))
        self.answer = dspy.Predict(HopAnswer)

    def hop_predictors(self) -> list[dspy.Predict]:
        return [getattr(self, f"hop{i}") for i in range(1, self.hops + 1)]

    # -- one hop's LM call(s) -----------------------------------------------------------------------------------
    def _plan(self, hop: int, question: str, context: list[str], calls: list[int]) -> list[HopPlan]:
        predictor = getattr(self, f"hop{hop}")
        plans = []
        for s in range(self.samples):
            kwargs: dict[str, Any] = {}
            if self.samples > 1:
                kwargs["config"] = {"temperature": self.temperature, "rollout_id": s}
            calls[0] += 1
            try:
                out = predictor(question=question, context=list(context), hop=hop, **kwargs)
            except AdapterParseError as exc:  # a malformed reply: fall back to searching the question itself
                plans.append(HopPlan(search_query=question, error=f"AdapterParseError: {str(exc)[:300]}"))
                continue
            plans.append(HopPlan(
                rationale=str(getattr(out, "rationale", "") or "").strip(),
                search_query=str(getattr(out, "search_query", "") or "").strip(),
                query_entity=str(getattr(out, "query_entity", "") or "").strip(),
                sparql=clean_sparql(getattr(out, "sparql", None)),
            ))
        return plans

    def forward(self, question: str) -> dspy.Prediction:
        tb = get_toolbox(self.toolbox)
        trace = new_trace("detllm", question)
        calls = [0]  # LM calls issued by this forward (a local: the module may serve several threads)
        requests = _RequestCounter()
        with dspy.context(callbacks=[*(dspy.settings.get("callbacks") or []), requests]):
            return self._forward(tb, question, trace, calls, requests)

    def _forward(self, tb, question: str, trace: dict[str, Any], calls: list[int],
                 requests: _RequestCounter) -> dspy.Prediction:

        context_ev: list[Evidence] = []
        context_keys: set = set()
        kg_answer = None
        hop_traces = []
        for hop in range(1, self.hops + 1):
            context = [e.render() for e in context_ev]
            plans = self._plan(hop, question, context, calls)
            r = hop_retrieval(tb, question, plans, k=self.k, k_per_source=self.k_per_source, exclude=context_keys,
                              rerank_query=self.rerank_query)
            for e in r["kept"]:
                context_keys.add(_ev_key(e))
                context_ev.append(e)
            results: list[SparqlResult] = r["sparql_results"]
            for res in results:
                trace["sparql"].append({**res.to_dict(), "hop": hop})
                ans = _kg_answer(res, tb.sparql.labels)
                if ans:
                    kg_answer = ans  # the last hop whose query returned rows wins
            first = plans[0]
            step = {
                "step": "hop",
                "hop": hop,
                "rationale": first.rationale,
                "search_query": first.search_query,
                "query_entity": first.query_entity,
                "linked_entities": r["linked_entities"],
                "sparql": first.sparql,
                "sparql_ok": (all(res.ok for res in results) if results else None),
                "sparql_rows": sum(len(res.rows) if res.boolean is None else 1 for res in results if res.ok),
                "sparql_errors": [res.error for res in results if res.error],
                "grounded": r["grounded"],
                "n_by_source": r["n_by_source"],
                "kept": [_ev_dict(e, hop) for e in r["kept"]],
                "retrieval_ms": r["retrieval_ms"],
            }
            if self.samples > 1:
                step["samples"] = [p.to_dict() for p in plans]
                step["search_queries"] = _distinct(p.search_query for p in plans)
                step["sparqls"] = _distinct(p.sparql for p in plans if p.sparql)
            errors = [p.error for p in plans if p.error]
            if errors:
                step["errors"] = errors
            hop_traces.append(step)
            trace["steps"].append(step)
            for cand in r["linked_entities"]:
                if cand["id"] not in {x["id"] for x in trace["entities"]}:
                    trace["entities"].append(cand)
            trace["passages"].extend(_ev_dict(e, hop) for e in r["passages"])
            trace["triples"].extend(_ev_dict(e, hop) for e in r["triples"])
            trace["tool_calls"].extend({**c, "hop": hop} for c in r["tool_calls"])

        context = [e.render() for e in context_ev]
        calls[0] += 1
        try:
            final = clean_answer(self.answer(question=question, context=context).answer)
            answer_error = None
        except AdapterParseError as exc:
            final, answer_error = "", f"AdapterParseError: {str(exc)[:300]}"
        step = {"step": "answer", "answer": final}
        if answer_error:
            step["error"] = answer_error
        trace["steps"].append(step)
        trace["hops"] = hop_traces
        trace["evidence"] = [item for h in hop_traces for item in h["kept"]]
        trace["lm_calls"] = calls[0]
        trace["lm_requests"] = requests.n
        trace["answers"]["kg"] = kg_answer
        trace["answers"]["final"] = final
        return dspy.Prediction(answer=final, trace=trace)


__all__ = ["DETLLM", "HopPlan", "hop_retrieval", "clean_sparql", "ground_sparql"]
