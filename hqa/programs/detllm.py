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
the next hop — the hop itself is :class:`hqa.retrievers.hop.HopRetriever`, the one retrieval path of every
program.  After ``hops`` hops one final LM call (:class:`~hqa.signatures.detllm.HopAnswer`) answers.

So ``hops`` hops cost exactly ``hops + 1`` LM calls; with ``samples > 1`` every hop call is sampled ``samples``
times (temperature ``temperature``, distinct rollout ids) and all distinct queries are used: ``hops * samples + 1``.
The trace records both ``lm_calls`` (predictor calls) and ``lm_requests`` (requests the LM actually received,
counted by a thread-local callback, so an adapter's parse-failure retry shows up there).
Retrievers are never attributes: the program stores a toolbox *name*, so ``deepcopy``/``save`` never copy an index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback
from dspy.utils.exceptions import AdapterParseError

from hqa.data import wikidata as W
from hqa.metrics import NO_ANSWER
from hqa.programs.common import HumanDemoSpec, clean_answer, new_trace
from hqa.retrievers.base import Evidence
from hqa.retrievers.registry import get_toolbox
from hqa.retrievers.hop import HopRequest, HopRetriever, evidence_key, ground_sparql, result_ids
from hqa.retrievers.sparql import SparqlResult
from hqa.signatures.detllm import HopAnswer, HopQuery

# an LM field that says "no query" / "no entity": the no-answer words plus phrasings of a missing query
_NONE_WORDS = NO_ANSWER | {"no", "no query", "no sparql", "-", "not needed", "not applicable"}
_FENCE_RE = re.compile(r"^\s*```[\w-]*\s*\n?(.*?)\n?\s*```\s*$", re.S)
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


def _ev_dict(e: Evidence, hop: int) -> dict[str, Any]:
    d = e.to_dict()
    d["hop"] = hop
    return d


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


def hop_request(question: str, plans: list[HopPlan], rerank_query: str = "both") -> HopRequest:
    """What DETLLM's hop retrieves for the plans its hop call wrote: dense per distinct search query, BM25 per
    distinct (search query + query entity), the query entities linked, each SPARQL query grounded with its entity."""
    searches = _distinct((p.search_query or "").strip() for p in plans) or [question]
    pairs = _distinct(((p.search_query or "").strip() or question, (p.query_entity or "").strip()) for p in plans)
    mentions = _distinct((p.query_entity or "").strip() for p in plans if not _none_ish(p.query_entity))
    if rerank_query == "question":
        rq = question
    elif rerank_query == "hop":
        rq = " ".join(searches)
    else:
        rq = " ".join(_distinct([question] + searches))
    return HopRequest(
        searches=searches,
        triple_queries=[f"{q} {ent}".strip() if not _none_ish(ent) else q for q, ent in pairs],
        mentions=mentions,
        sparql=[(p.sparql, (p.query_entity or "").strip()) for p in plans if p.sparql],
        rerank_query=rq,
    )


def human_hop_demos(demo, hops: int) -> dict[str, dspy.Example]:
    """Map one human solution process onto DETLLM's per-hop predictors, as far as its fields allow.

    Hop i takes the human's i-th WikiSearch input as ``search_query``, i-th GetWikidataID input as
    ``query_entity`` and i-th RunSparql input as ``sparql`` ("None" when the human ran fewer), the thought before
    the first of these as ``rationale``, and as ``context`` the observations of the steps before it; ``answer`` gets
    all observations and the human's answer.  A hop with neither a search nor an entity is not produced.
    """
    steps = [s for s in demo.steps if s.action]
    by_tool: dict[str, list] = {"search": [], "entity": [], "sparql": []}
    for i, s in enumerate(steps):
        kind = {"WikiSearch": "search", "WikiSearchSummary": "search", "GetWikidataID": "entity",
                "RunSparql": "sparql"}.get(s.action)
        if kind:
            by_tool[kind].append(i)

    def obs(upto: int) -> list[str]:
        return [f"[{'text' if s.action.startswith('Wiki') else 'sparql'}] {s.observation[:400]}"
                for s in steps[:upto] if s.observation]

    out: dict[str, dspy.Example] = {}
    for h in range(1, hops + 1):
        picks = {k: (v[h - 1] if len(v) >= h else None) for k, v in by_tool.items()}
        if picks["search"] is None and picks["entity"] is None:
            continue
        first = min(i for i in picks.values() if i is not None)
        out[f"hop{h}"] = dspy.Example(
            question=demo.question, context=obs(first), hop=h, rationale=steps[first].thought,
            search_query=steps[picks["search"]].action_input if picks["search"] is not None else demo.question,
            query_entity=steps[picks["entity"]].action_input if picks["entity"] is not None else "",
            sparql=steps[picks["sparql"]].action_input if picks["sparql"] is not None else "None",
            source=demo.source, demo_id=demo.id).with_inputs("question", "context", "hop")
    answer = demo.wikipedia_answer or demo.wikidata_answer
    if answer:
        out["answer"] = dspy.Example(question=demo.question, context=obs(len(steps)), answer=answer,
                                     source=demo.source, demo_id=demo.id).with_inputs("question", "context")
    return out


def _kg_answer(res: SparqlResult, labels_fn, max_values: int = 10) -> str | None:
    """Labels of a result's values (``yes``/``no`` for ASK), joined with `` | ``."""
    if not res.ok:
        return None
    if res.boolean is not None:
        return "yes" if res.boolean else "no"
    if not res.rows:
        return None
    labels: dict[str, str] = {}
    ids = result_ids(res)
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
            vals.append(W.render_value(row[v], labels))
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

    def human_demo_builders(self) -> dict[str, HumanDemoSpec]:
        """Hop i's predictor learns from the human processes' i-th search / entity / SPARQL (:func:`human_hop_demos`),
        the answer predictor from their observations and answers; not every process has every hop, so 3k are
        drawn."""
        def build(name: str):
            return lambda demo: human_hop_demos(demo, self.hops).get(name)

        names = [f"hop{i}" for i in range(1, self.hops + 1)] + ["answer"]
        return {name: HumanDemoSpec("full", build(name), pool=3) for name in names}

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
            r = HopRetriever(tb).run(question, hop_request(question, plans, self.rerank_query), k=self.k,
                                     k_per_source=self.k_per_source, exclude=context_keys)
            for e in r.kept:
                context_keys.add(evidence_key(e))
                context_ev.append(e)
            results: list[SparqlResult] = r.sparql_results
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
                "linked_entities": r.linked,
                "sparql": first.sparql,
                "sparql_ok": (all(res.ok for res in results) if results else None),
                "sparql_rows": sum(len(res.rows) if res.boolean is None else 1 for res in results if res.ok),
                "sparql_errors": [res.error for res in results if res.error],
                "grounded": r.grounded,
                "n_by_source": r.n_by_source,
                "kept": [_ev_dict(e, hop) for e in r.kept],
                "retrieval_ms": r.retrieval_ms,
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
            if r.source_errors:
                step["source_errors"] = r.source_errors
            for cand in r.linked:
                if cand["id"] not in {x["id"] for x in trace["entities"]}:
                    trace["entities"].append(cand)
            trace["passages"].extend(_ev_dict(e, hop) for e in r.passages)
            trace["triples"].extend(_ev_dict(e, hop) for e in r.triples)
            trace["tool_calls"].extend({**c, "hop": hop} for c in r.tool_calls)

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


__all__ = ["DETLLM", "HopPlan", "hop_request", "human_hop_demos", "clean_sparql", "ground_sparql"]
