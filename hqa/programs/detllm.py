"""DETLLM — DIVKNOWQA's decompose–retrieve–answer system over text, KG triples and SPARQL (DIVKNOWQA §3).

For a multi-hop question, each hop is one LM prompt (:class:`~hqa.signatures.detllm.HopQuery`, DIVKNOWQA Prompts
3-4) that writes a step-by-step rationale, the next single-hop question as a search query, the entity it is about
and a Wikidata SPARQL query (or "None").  The prompt is sampled ``samples`` times (the paper's t semantically diverse
queries, §3.2) at temperature 0.7 (§3.2), each sample with its own rollout id; retrieval is fused across them: every
distinct query of every sample searches, and the union is deduplicated and reranked as one pool.  Retrieval then
runs over three sources (§3.2):

* **text** — dense passages for the search queries (``toolbox.dense``; the paper uses Contriever, ``dense_model``);
* **KB as text** — BM25 over triples linearized ``"sub relation obj"`` for ``search query + query entity``
  (``toolbox.bm25``);
* **KB symbolic** — the rows of the SPARQL query (``toolbox.sparql.run``; read-only checked, LIMITed, timed out; an
  error is an observation in the trace, never an exception).

The query entity is linked to Wikidata ids (``toolbox.linker.link``) and disambiguated against candidate
descriptions by the *hop's search query* (§4.3, "SPARQL Generation Analysis"); when the SPARQL query names exactly
one entity the store cannot know (``wd:Gabon``, ``wd:ENTITY``, a QID missing from the local pack), that reference
is grounded to the top linked id.  The pool is reranked by a cross-encoder (``cross-encoder/ms-marco-MiniLM-L-6-v2``,
§3.3) against the hop's single-hop question and the top-k join the context of the next hop — the hop itself is
:class:`hqa.retrievers.hop.HopRetriever`, the one retrieval path of every program.  After ``hops`` hops one final
prompt (:class:`~hqa.signatures.detllm.HopAnswer`, Prompt 5) reasons step by step and answers.

Uncompiled, every predictor carries DIVKNOWQA's three human-annotated demonstrations (Appendix A.3, shipped as
``hqa/data/detllm/divknowqa_demos.json``; §4.1 "three human-annotated demonstrations"); a compiled program carries
what its optimizer chose (HumanIQ traces mapped onto the hops with :func:`human_hop_demos`, bootstrapped demos …).

So ``hops`` hops are ``hops + 1`` prompts and ``hops * samples + 1`` LM requests.  The trace records both
``lm_calls`` (predictor calls, ``hops * samples + 1``) and ``lm_requests`` (requests the LM actually received,
counted by :class:`hqa.lm.calls.LMRequestCounter`, so an adapter's parse-failure retry shows up there).

Ablations are constructor options (``--program-kwargs``), each a row of a DIVKNOWQA table (Table 3, Table 6): see
:class:`DETLLM`.

The retrievers come in the toolbox given to the constructor, which is no DSPy state and deep-copies to itself,
so ``deepcopy``/``save`` never copy an index.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

import dspy

from hqa.data import wikidata as W
from hqa.errors import ConfigError
from hqa.scoring.metrics import NO_ANSWER
from hqa.scoring.answers import clean_answer
from hqa.programs.arguments import Arguments, arg
from hqa.programs.base import Program
from hqa.data.human import HumanDemoSpec
from hqa.lm.calls import LMRequestCounter, recording, safe_predict
from hqa.retrievers.base import Evidence, SparqlResult
from hqa.retrievers.embedding.encoders import resolve_dense_model
from hqa.retrievers.hop import HopRequest, HopRetriever, evidence_key, ground_sparql, result_ids
from hqa.signatures.detllm import HopAnswer, HopQuery
from hqa.schemas.trace import Hop, SparqlCall, ToolCall, Trace, new_trace

# an LM field that says "no query" / "no entity": the no-answer words plus phrasings of a missing query
_NONE_WORDS = NO_ANSWER | {"no", "no query", "no sparql", "-", "not needed", "not applicable"}
_FENCE_RE = re.compile(r"^\s*```[\w-]*\s*\n?(.*?)\n?\s*```\s*$", re.S)
RERANK_QUERIES = ("both", "question", "hop")


# -- helpers (module level so the benchmark and other programs can reuse them) ----------------------------------
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
    return None if _none_ish(text) else text


def _none_ish(text: Any) -> bool:
    return text is None or str(text).strip().strip("\"'` .").lower() in _NONE_WORDS


def _ev_dict(e: Evidence, hop: int) -> dict[str, Any]:
    return {**e.to_dict(), "hop": hop}


@dataclass
class HopPlan:
    """What one hop call wrote (one per sample)."""

    rationale: str = ""
    search_query: str = ""
    query_entity: str = ""
    sparql: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _distinct(items) -> list:
    """The non-empty items, first occurrences in order."""
    return list(dict.fromkeys(x for x in items if x))


def hop_request(question: str, plans: list[HopPlan], rerank_query: str = "hop", sparql: bool = True) -> HopRequest:
    """What DETLLM's hop retrieves for the plans its hop prompt's samples wrote: dense per distinct search query,
    BM25 per distinct (search query + query entity), the query entities linked, each SPARQL query grounded with its
    entity (none with ``sparql=False``, Table 3 "w/o SPARQL").

    The rerank query (DIVKNOWQA §3.3: relevance "in the context of a single-hop question"): ``"hop"`` — the hop's
    single-hop question, the first sample's search query; ``"question"`` — the full question; ``"both"`` — the full
    question followed by every distinct search query."""
    searches = _distinct((p.search_query or "").strip() for p in plans) or [question]
    pairs = _distinct(((p.search_query or "").strip() or question, (p.query_entity or "").strip()) for p in plans)
    mentions = _distinct((p.query_entity or "").strip() for p in plans if not _none_ish(p.query_entity))
    rq = {"question": question, "hop": searches[0]}.get(rerank_query) or " ".join(_distinct([question] + searches))
    return HopRequest(searches=searches, mentions=mentions, rerank_query=rq,
                      triple_queries=[f"{q} {ent}".strip() if not _none_ish(ent) else q for q, ent in pairs],
                      sparql=[(p.sparql, (p.query_entity or "").strip()) for p in plans if p.sparql] if sparql else [])


# -- DIVKNOWQA's demonstrations (Appendix A.3) ------------------------------------------------------------------
DEMOS_FILE = "detllm/divknowqa_demos.json"


def paper_demos() -> dict[str, list[dspy.Example]]:
    """DIVKNOWQA's three human-annotated demonstrations per prompt (Appendix A.3: Prompt 3 → ``hop1``, Prompt 4 →
    ``hop2``, Prompt 5 → ``answer``), read from the package data file that cites them."""
    import json
    from importlib import resources

    data = json.loads(resources.files("hqa.data").joinpath(DEMOS_FILE).read_text(encoding="utf-8"))
    out = {name: [dspy.Example(**d, hop=hop).with_inputs("question", "context", "hop") for d in data[name]]
           for name, hop in (("hop1", 1), ("hop2", 2))}
    out["answer"] = [dspy.Example(**d).with_inputs("question", "context") for d in data["answer"]]
    return out


def human_hop_demos(demo, hops: int) -> dict[str, dspy.Example]:
    """Map one human solution process onto DETLLM's per-hop predictors, as far as its fields allow.

    Hop i takes the human's i-th WikiSearch input as ``search_query``, i-th GetWikidataID input as
    ``query_entity`` and i-th RunSparql input as ``sparql`` ("None" when the human ran fewer), the thought before
    the first of these as ``rationale``, and as ``context`` the observations of the steps before it; ``answer`` gets
    all observations, the human's last thought as its ``rationale`` and the human's answer.  A hop with neither a
    search nor an entity is not produced.
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
        thoughts = [s.thought for s in demo.steps if (s.thought or "").strip()]
        out["answer"] = dspy.Example(question=demo.question, context=obs(len(steps)),
                                     rationale=thoughts[-1] if thoughts else "", answer=answer,
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
    ids = result_ids(res)
    try:
        labels: dict[str, str] = labels_fn(ids) if ids else {}
    except Exception:
        labels = {}
    # prefer the projection's non-label variables; skip ?xLabel companions when ?x is there
    vals = _distinct(W.render_value(row[v], labels) for row in res.rows for v in res.variables or row.keys()
                     if v in row and not (v.endswith("Label") and v[: -len("Label")] in row))
    return " | ".join(vals[:max_values]) if vals else None


# -- Table 3's retrieval arms: which retriever serves which source (outside DSPy state, cached per toolbox) ------
SOURCES_MODES = ("separate", "unified")
TEXT_RETRIEVERS = ("dense", "sparse", "both")
KB_RETRIEVERS = ("sparse", "dense")


class _Nothing:
    """A source switched off: no hits (the tool call is recorded as 0 hits)."""

    def __call__(self, query: str, k: int = 5) -> list[Evidence]:
        return []


def source_view(tb, sources: str, text_retriever: str, kb_retriever: str, dense_model: str | None):
    """The toolbox arranged for one arm (DIVKNOWQA §3.2 and Table 3): a :meth:`~hqa.toolbox.Toolbox.view` with the
    parts :class:`HopRetriever` reads (``dense``, ``text_bm25``, ``bm25``) replaced, everything else the toolbox's
    own.  Default (``separate``/``dense``/``sparse``): dense passages only, BM25 over linearized triples."""
    dense = tb.doc_index("text", "dense", dense_model) if dense_model else tb.dense
    if sources == "unified":
        kind = "dense" if text_retriever == "dense" else "sparse"
        return tb.view(dense=tb.doc_index("unified", kind, dense_model if kind == "dense" else None),
                       text_bm25=None, bm25=_Nothing())
    parts: dict[str, Any] = {"dense": dense, "text_bm25": None}
    text_bm25 = getattr(tb, "text_bm25", None)
    if text_retriever in ("sparse", "both"):
        sparse = text_bm25 if text_bm25 is not None else tb.doc_index("text", "sparse", None)
        parts["dense" if text_retriever == "sparse" else "text_bm25"] = sparse  # instead of / beside dense
    if kb_retriever == "dense":
        parts["bm25"] = tb.doc_index("triples", "dense", dense_model)
    return tb.view(**parts)


# -- Table 6's oracle: gold sub-answers as evidence ---------------------------------------------------------------
_GOLD: dict[str, dict[str, list[dict]]] = {}


def gold_decompositions(dataset: str) -> dict[str, list[dict]]:
    """Normalised question → gold decomposition (``[{question, answers}, …]``) of a dataset that has one."""
    if dataset not in _GOLD:
        from hqa.data.datasets import load_dataset, question_key

        gold = {question_key(r.question): r.meta.get("decomposition") for r in load_dataset(dataset)}
        gold = {q: d for q, d in gold.items() if d}
        if not gold:
            raise ConfigError(f"detllm: oracle needs gold sub-answers; dataset {dataset!r} has no decomposition")
        _GOLD[dataset] = gold
    return _GOLD[dataset]


def oracle_evidence(question: str, hop: int, dataset: str) -> Evidence | None:
    """The gold sub-question and sub-answers of ``hop`` as one evidence item, or None when the dataset has none."""
    from hqa.data.datasets import question_key

    steps = gold_decompositions(dataset).get(question_key(question)) or []
    if hop > len(steps) or not steps[hop - 1].get("answers"):
        return None
    step = steps[hop - 1]
    return Evidence(text=f"{step['question']} {' / '.join(step['answers'])}", source="text", score=float("inf"),
                    meta={"id": f"oracle:{dataset}:{hop}:{question_key(question)[:80]}", "oracle": True})


# -- the program -------------------------------------------------------------------------------------------------
class DETLLMArguments(Arguments):
    """:class:`DETLLM`'s arguments (see its docstring); ``k`` and ``k_per_source`` a serve request may set
    (``hops`` is structure: one predictor per hop, so it is not)."""

    hops: int = arg(2)
    k: int = arg(5, high=50, runtime=True)
    k_per_source: int = arg(5, high=50, runtime=True)
    samples: int = arg(3)
    temperature: float = arg(0.7)
    rerank_query: Literal[RERANK_QUERIES] = arg("hop")  # type: ignore[valid-type]
    link_query: Literal["hop", "question"] = arg("hop")
    sources: Literal[SOURCES_MODES] = arg("separate")  # type: ignore[valid-type]
    text_retriever: Literal[TEXT_RETRIEVERS] = arg("dense")  # type: ignore[valid-type]
    kb_retriever: Literal[KB_RETRIEVERS] = arg("sparse")  # type: ignore[valid-type]
    sparql: bool = arg(True)
    dense_model: str = arg("")
    demos: Literal["paper", "none"] = arg("paper")
    oracle: str = arg("off")
    oracle_dataset: str = arg("bamboogle")


class DETLLM(Program):
    """Decompose → retrieve (text, triples, SPARQL) → rerank, for ``hops`` hops; then answer (DIVKNOWQA §3).

    Predictors: ``hop1`` … ``hop{hops}`` (one per hop, so an optimizer gives each its own demos) and ``answer``.

    Paper defaults (DIVKNOWQA §3.2-3.3, §4.1, Appendix A.3) and the ablations each option names:

    * ``samples`` — t, the semantically diverse queries sampled per hop (§3.2).  The paper does not state t; 3 is
      hqa's choice.  ``samples=1`` is one greedy query (an ablation, not in the paper).
    * ``temperature`` — the sampling temperature of the diverse queries: 0.7 as stated in §3.2.
    * ``sources`` — ``"separate"`` (paper: text and KB retrieved separately) or ``"unified"`` (Table 3 "Text-KB":
      passages and linearized triples in one index).
    * ``text_retriever`` — ``"dense"`` (paper: Contriever) | ``"sparse"`` (Table 3 "Text(Sparse)": BM25 over
      passages) | ``"both"`` (dense and BM25 passages, hqa's ``simple`` program; not in the paper).  With
      ``sources="unified"`` it chooses the unified index's retriever (Table 3 "Text-KB(Dense)" / "(Sparse)").
    * ``kb_retriever`` — ``"sparse"`` (paper: BM25 over ``"sub relation obj"``) | ``"dense"`` (Table 3 "KB(Dense)").
    * ``sparql`` — True (paper) | False (Table 3 "w/o SPARQL").
    * ``dense_model`` — ``""``: the toolbox's dense retriever (the configured embedder, all-MiniLM-L6-v2 by default:
      a deviation, the paper uses Contriever); ``"contriever"`` / ``"facebook/contriever-msmarco"``: Contriever from
      the local Hugging Face cache (one clear error when it is not there); any other sentence-transformers name or
      path works too.  A model other than the toolbox's indexes the passages itself.
    * ``rerank_query`` — ``"hop"`` (paper §3.3: the hop's single-hop question) | ``"question"`` | ``"both"``.
    * ``link_query`` — ``"hop"`` (paper §4.3: candidates' descriptions are compared with the hop's query) |
      ``"question"`` (the full multi-hop question).
    * ``demos`` — ``"paper"`` (§4.1: the three human-annotated demonstrations of Appendix A.3) | ``"none"``.  A
      compiled program's demos replace these.
    * ``oracle`` — ``"off"`` | ``"all"`` | ``"hop<N>"``: gold sub-answers of ``oracle_dataset`` join the evidence
      of every hop / of hop N (Table 6; Bamboogle has gold sub-answers but not DIVKNOWQA's per-source gold passages
      / triples, so the arms are per hop rather than Oracle_Text / Oracle_KB).
    * ``k`` — top-k kept per hop after reranking; ``k_per_source`` — hits per query per retriever.  Neither is
      stated by the paper.
    """

    needs_toolbox = writes_sparql = True
    Arguments = DETLLMArguments

    def __init__(self, hops: int = 2, k: int = 5, k_per_source: int = 5, samples: int = 3,
                 temperature: float = 0.7, toolbox=None, rerank_query: str = "hop",
                 link_query: str = "hop", sources: str = "separate", text_retriever: str = "dense",
                 kb_retriever: str = "sparse", sparql: bool = True, dense_model: str = "", demos: str = "paper",
                 oracle: str = "off", oracle_dataset: str = "bamboogle"):
        super().__init__()
        self.take_arguments(locals())
        if not (oracle in ("off", "all") or re.fullmatch(r"hop[1-9]\d*", str(oracle))):
            raise ConfigError(f"detllm: oracle must be off, all or hop<N>, got {oracle!r}")
        self.hops = int(hops)
        self.k = int(k)
        self.k_per_source = int(k_per_source)
        self.samples = int(samples)
        self.temperature = float(temperature)
        self.toolbox = toolbox
        self.rerank_query = rerank_query
        self.link_query = link_query
        self.sources = sources
        self.text_retriever = text_retriever
        self.kb_retriever = kb_retriever
        self.sparql = bool(sparql)
        self.dense_model = resolve_dense_model(dense_model)
        self.demos_from = demos
        self.oracle = oracle
        self.oracle_dataset = oracle_dataset
        for i in range(1, self.hops + 1):
            setattr(self, f"hop{i}", dspy.Predict(HopQuery))
        self.answer = dspy.Predict(HopAnswer)
        if demos == "paper":
            shipped = paper_demos()
            for i in range(1, self.hops + 1):  # Prompt 3 for the first hop, Prompt 4 for every later one
                getattr(self, f"hop{i}").demos = list(shipped["hop1" if i == 1 else "hop2"])
            self.answer.demos = list(shipped["answer"])

    def _oracle_hops(self) -> set[int]:
        if self.oracle == "off":
            return set()
        return set(range(1, self.hops + 1)) if self.oracle == "all" else {int(self.oracle[3:])}

    def human_demo_builders(self) -> dict[str, HumanDemoSpec]:
        """Hop i's predictor learns from the human processes' i-th search / entity / SPARQL (:func:`human_hop_demos`),
        the answer predictor from their observations and answers; not every process has every hop, so 3k are
        drawn."""
        names = [f"hop{i}" for i in range(1, self.hops + 1)] + ["answer"]
        return {name: HumanDemoSpec("full", lambda demo, name=name: human_hop_demos(demo, self.hops).get(name), pool=3)
                for name in names}

    # -- one hop's LM call(s) -----------------------------------------------------------------------------------
    def _plan(self, hop: int, question: str, context: list[str], trace: Trace) -> list[HopPlan]:
        predictor = getattr(self, f"hop{hop}")
        plans = []
        for s in range(self.samples):
            # t diverse queries (DIVKNOWQA §3.2): sampled, each its own rollout
            kwargs = {"config": {"temperature": self.temperature, "rollout_id": s}} if self.samples > 1 else {}
            out, error = safe_predict(predictor, question=question, context=list(context), hop=hop, **kwargs)
            trace.note(error)  # the question's failures, whatever the hop does instead (hqa.answering.presentation)
            if out is None:  # a malformed reply: fall back to searching the question itself
                plans.append(HopPlan(search_query=question, error=f"AdapterParseError: {error.message[:300]}"))
                continue
            written = (str(getattr(out, f, "") or "").strip() for f in ("rationale", "search_query", "query_entity"))
            plans.append(HopPlan(*written, sparql=clean_sparql(getattr(out, "sparql", None))))
        return plans

    def forward(self, question: str) -> dspy.Prediction:
        tb = source_view(self.toolbox_or_fail(), self.sources, self.text_retriever, self.kb_retriever,
                         self.dense_model or None)
        trace = new_trace("detllm", question)
        requests = LMRequestCounter()  # a local: the module may serve several threads
        with recording(self, requests):
            self._forward(tb, question, trace)
        trace.lm_calls = self.hops * self.samples + 1  # one per sample and hop, one answer
        trace.lm_requests = requests.n
        return dspy.Prediction(answer=trace.answers.final, trace=trace.to_dict())

    def _forward(self, tb, question: str, trace: Trace) -> None:
        context_ev: list[Evidence] = []
        context_keys: set = set()
        kg_answer = None
        trace.hops = []
        for hop in range(1, self.hops + 1):
            context = [e.render() for e in context_ev]
            plans = self._plan(hop, question, context, trace)
            req = hop_request(question, plans, self.rerank_query, sparql=self.sparql)
            # the linker disambiguates by what run() is given as the question: the hop query (paper) or the question
            link_by = req.searches[0] if self.link_query == "hop" else question
            oracle = oracle_evidence(question, hop, self.oracle_dataset) if hop in self._oracle_hops() else None
            r = HopRetriever(tb).run(link_by, req, k=self.k - (oracle is not None),
                                     k_per_source=self.k_per_source, exclude=context_keys)
            if oracle is not None:
                r.kept.insert(0, oracle)
                r.passages.insert(0, oracle)
            context_keys.update(evidence_key(e) for e in r.kept)
            context_ev.extend(r.kept)
            results = r.sparql_results
            for res in results:
                trace.sparql.append(SparqlCall.from_dict({**res.to_dict(), "hop": hop}))
                if ans := _kg_answer(res, tb.sparql.labels):
                    kg_answer = ans  # the last hop whose query returned rows wins
            first = plans[0]
            step = Hop(
                step="hop", hop=hop, rerank_query=req.rerank_query, link_query=link_by, rationale=first.rationale,
                search_query=first.search_query, query_entity=first.query_entity, linked_entities=r.linked,
                sparql=first.sparql, sparql_ok=(all(res.ok for res in results) if results else None),
                sparql_rows=sum(len(res.rows) if res.boolean is None else 1 for res in results if res.ok),
                sparql_errors=[res.error for res in results if res.error], grounded=r.grounded,
                n_by_source=r.n_by_source, kept=[_ev_dict(e, hop) for e in r.kept], retrieval_ms=r.retrieval_ms,
            )
            if self.samples > 1:
                step.samples = [p.to_dict() for p in plans]
                step.search_queries = _distinct(p.search_query for p in plans)
                step.sparqls = _distinct(p.sparql for p in plans if p.sparql)
            if errors := [p.error for p in plans if p.error]:
                step.errors = errors
            if r.source_errors:
                step.source_errors = r.source_errors
                trace.source_errors = {**r.source_errors, **(trace.source_errors or {})}
            trace.hops.append(step)
            trace.steps.append(step.to_dict())
            for cand in r.linked:
                if cand["id"] not in {x["id"] for x in trace.entities}:
                    trace.entities.append(cand)
            trace.passages.extend(_ev_dict(e, hop) for e in r.passages)
            trace.triples.extend(_ev_dict(e, hop) for e in r.triples)
            trace.tool_calls.extend(ToolCall.from_dict({**c, "hop": hop}) for c in r.tool_calls)

        out, error = safe_predict(self.answer, question=question, context=[e.render() for e in context_ev])
        trace.note(error)
        final = clean_answer(out.answer) if out is not None else ""
        step = {"step": "answer", "rationale": str(getattr(out, "rationale", "") or "").strip(), "answer": final}
        if error is not None:
            step["error"] = f"AdapterParseError: {error.message[:300]}"
        trace.steps.append(step)
        trace.evidence = [item for h in trace.hops for item in h.kept]
        trace.answers.kg = kg_answer
        trace.answers.final = final


__all__ = ["DETLLM", "HopPlan", "clean_sparql", "ground_sparql", "hop_request", "human_hop_demos", "oracle_evidence",
           "paper_demos", "source_view"]
