"""Semi-Structured Chain-of-Thought (Su et al. 2023, "SS-CoT"): parse the question into a masked semi-structured
reasoning chain, fill its masks from the knowledge graph and from text, then let the LM fill the rest.

Path
----
1. **Parse** (SS-CoT §3.1): ``n_samples`` ``ParseChain`` calls at ``temperature`` (each its own ``rollout_id`` so
   none is a cache hit of another) → the Appendix-B filter (:func:`hqa.programs.sscot_chain.validate` with
   ``min_masks`` / ``max_masks``) → self-consistency vote over the kept chains.  The chain language is
   ``head >> relation >> tail; …; final answer: #answer`` (:mod:`hqa.programs.sscot_chain`).
2. **Fill**, one named step per entry of ``sources`` (default ``"kg,text,model"``, the paper's KG+Text+Model):

   * ``kg`` — SS-CoT Alg. 1: repeat {take the valid triples (§3.2: relation and head known, tail one unfilled
     mask) not yet queried; link the head (entity linker; a head that is exactly a mask the KG filled reuses that
     fill's Wikidata ids) and the relation (:class:`hqa.retrievers.linking.relations.RelationLinker`); run
     ``SELECT ?x WHERE { wd:head wdt:rel ?x }``; fill the tail from the rows} while new valid triples appear.
   * ``text`` — SS-CoT Alg. 2: the same loop; per triple the LM turns ``("head", "relation", ?)`` into a
     single-hop question (``to_question``), the dense retriever (``dense_model``) returns the top ``k`` passages (10,
     Appendix E), the LM answers from them or says "unknown" (``read``); an answer fills the tail.
   * ``model`` — SS-CoT §3.2 "Use of Parametric Memory": the LM copies the chain with every remaining mask and the
     final answer filled (``fill``); it runs only when a mask is still open or the final answer is ``#answer``.

   Each step lands in ``trace["steps"]`` as ``{"step": "kg"|"text"|"model", "rounds", "filled": {mask: value}}``
   and every fill in ``trace["fills"]`` (``via`` = ``kg`` / ``text`` / ``lm``).
3. **Answer**: the final-answer clause of the model-filled chain; without a ``model`` step, the value of the final
   mask (``#n``) or, for ``#answer``, of the last triple's tail (hqa's rule: every order the paper runs ends with
   the model).

Orders (Table 3): ``kg,text,model`` (default), ``text,kg,model``, ``kg,model``, ``text,model``, ``model``, and
``kg`` / ``text`` / ``kg,text`` / ``text,kg`` without the model (hqa's ablations: what the external sources alone
fill).  The model step, when present, is last: the paper puts parametric memory last (§3.2).

Demos: every predictor starts from the SS-CoT Table 4 exemplars (``hqa/data/sscot/table4_exemplars.json``;
``demos="none"`` gives the zero-shot ablation).  Table 4 prints 3 exemplars per step (6 for parsing); the paper used
25 (parse, fill) and 15 (question, read) on 2Wiki/MuSiQue and 4 on Bamboogle (Appendix D), sets it does not publish.
:meth:`SemiStructuredCoT.human_demo_builders` turns Bamboogle's gold decompositions into demos for ``parse``,
``to_question``, ``fill`` and ``recall`` (``hqa compile --optimizer labeled-human`` / ``human+bootstrap`` /
``dpp-human`` and the other per-question selectors); evaluation questions never become demos.

Values the paper does not state, hqa's choices: ``n_samples`` 5 and ``temperature`` 0.7 (SS-CoT samples chains but
gives neither), ``max_entities`` 2 linked heads and ``max_properties`` 3 linked relations per triple (the paper
links with BLINK and MiniLM, top-1 implied), ``kg_limit`` 20 rows, a KG fill with several rows fills the mask with
the first value (all values stay in the fill record).  When no sampled chain survives the filter the paper says
nothing; hqa answers from the LM's memory (``recall``; ``trace["fallback"] = "recall"``) when ``model`` is a
source, else gives an empty answer.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from importlib import resources
from typing import Any

import dspy

from hqa.data import wikidata as W
from hqa.data.human import HumanDemo, HumanDemoSpec
from hqa.data.traces import Step
from hqa.errors import ConfigError
from hqa.scoring.answers import answer_or_none, clean_answer
from hqa.programs.arguments import Arguments, arg
from hqa.programs.base import Program
from hqa.lm.calls import safe_predict
from hqa.programs.sscot_chain import (
    ANSWER_MASK, MAX_MASKS, MIN_MASKS, Chain, canonical, fill_text, mask_number, mask_numbers, open_masks, parse_chain,
    substitute, try_parse, valid_triples, validate, vote,
)
from hqa.retrievers.base import Evidence
from hqa.retrievers.embedding.encoders import resolve_dense_model
from hqa.signatures.sscot import (
    AnswerFromContext, FillChain, ParseChain, ParseChainConstrained, RecallAnswer, TripleToQuestion,
)
from hqa.schemas.trace import SparqlCall, SSCoTTrace, ToolCall, Trace, new_trace

KG_TAIL = "SELECT DISTINCT ?x WHERE {{ wd:{qid} wdt:{pid} ?x . }} LIMIT {limit}"
SOURCES = ("kg", "text", "model")
DEFAULT_SOURCES = "kg,text,model"
ANSWER_KEY = {"kg": "kg", "text": "text", "lm": "parametric"}
EXEMPLARS = "table4_exemplars.json"
GRAMMAR_MAX_TOKENS = 640
_FINAL_TEXT = re.compile(r"final\s+answer\s*:\s*(.+?)\s*$", re.I | re.S)


def is_unknown(answer: Any) -> bool:
    """An empty or "unknown"-style reading (SS-CoT Alg. 2: the LM says "unknown" when the documents lack it)."""
    return answer_or_none(answer, clean=True) is None


def triplet_text(head: str, relation: str) -> str:
    """A valid triple as Table 4 shows it to the question converter: ``("head", "relation", ?)``."""
    return f'("{head}", "{relation}", ?)'


def _values(state: dict[int, dict]) -> dict[int, str]:
    """The fill state as ``{mask number: value}``."""
    return {n: r["value"] for n, r in state.items()}


def parse_sources(sources: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``"kg,text,model"`` → ``("kg", "text", "model")``; a clear error for unknown, repeated or misplaced steps."""
    items = [s.strip().lower() for s in (sources.split(",") if isinstance(sources, str) else sources) if s.strip()]
    if not items or any(s not in SOURCES for s in items) or len(set(items)) != len(items):
        raise ConfigError(f"sources must be distinct names among {', '.join(SOURCES)} separated by commas "
                          f"(e.g. {DEFAULT_SOURCES!r}); got {sources!r}")
    if "model" in items and items[-1] != "model":
        raise ConfigError(f"the model step fills what the other sources left, so it comes last; got {sources!r}")
    return tuple(items)


def load_exemplars() -> dict[str, list[dspy.Example]]:
    """SS-CoT Table 4's exemplars as demos per predictor (``parse``, ``to_question``, ``read``, ``fill``)."""
    data = json.loads(resources.files("hqa.data").joinpath("sscot", EXEMPLARS).read_text(encoding="utf-8"))
    inputs = {"parse": ("question",), "to_question": ("triplet",), "read": ("context", "question"),
              "fill": ("question", "reasoning_chain")}
    return {name: [dspy.Example(**{k: v for k, v in rec.items() if k != "dataset"}).with_inputs(*keys)
                   for rec in data[name]] for name, keys in inputs.items()}


# -- Bamboogle's gold decompositions as chain demos (human_demo_builders) ---------------------------------------------
#: the library variant of chain demos (a program's own demo library, not a HumanIQ one)
CHAIN_VARIANT = "chain"


def chain_demo(record: Any) -> HumanDemo | None:
    """A Bamboogle record's two gold sub-questions as one chain demo, a :class:`~hqa.data.human.HumanDemo` (the type
    every demo selector takes, DPP included): step i is triple i — ``thought`` the sub-question as asked,
    ``action_input`` the same with the first answer written ``#1`` (the chain's head), ``action`` the relation
    (``answer``), ``observation`` the gold sub-answer; ``response`` the question's gold answer; ``actions`` are the
    relations (the DPP's diversity term; every Bamboogle chain has the same two, so on Bamboogle the DPP ranks by
    relevance alone).  None when the record has no two-step decomposition or its second sub-question does not name
    the first answer."""
    steps = (getattr(record, "meta", None) or {}).get("decomposition") or []
    if len(steps) != 2 or not all(s.get("answers") for s in steps):
        return None
    (q1, a1), (q2, a2) = ((s["question"].strip(), s["answers"]) for s in steps)
    for alias in sorted(a1, key=len, reverse=True):
        hit = re.search(re.escape(alias), q2, re.I)
        if hit:
            q2_masked = q2[: hit.start()] + "#1" + q2[hit.end():]
            break
    else:
        return None
    triples = [Step(thought=q1, action="answer", action_input=q1, observation=a1[0]),
               Step(thought=q2, action="answer", action_input=q2_masked, observation=a2[0])]
    return HumanDemo(id=str(record.id), question=record.question, dataset="bamboogle", variant=CHAIN_VARIANT,
                     steps=triples, actions=[t.action for t in triples],
                     response=record.answers[0] if record.answers else a2[0], source="bamboogle-gold")


def demo_chains(demo: HumanDemo) -> tuple[str, str]:
    """A chain demo's masked chain and its filled twin:
    ``Q1 >> answer >> #1; Q2 (A1 written as #1) >> answer >> #2; final answer: #2`` and the same with the answers.
    Bamboogle gives sub-questions, not triples, so each head is free text (§3.1 allows it)."""
    n = len(demo.steps)
    masked = "; ".join(f"{s.action_input} >> {s.action} >> #{i + 1}" for i, s in enumerate(demo.steps))
    filled = "; ".join(f"{s.thought} >> {s.action} >> {s.observation}" for s in demo.steps)
    return f"{masked}; final answer: #{n}", f"{filled}; final answer: {demo.steps[-1].observation}"


def decomposition_chain(record: Any) -> tuple[str, str, list[str]] | None:
    """(masked chain, filled chain, sub-questions) of a Bamboogle record (:func:`chain_demo`), or None."""
    demo = chain_demo(record)
    return None if demo is None else (*demo_chains(demo), [s.thought for s in demo.steps])


def chain_parse_demo(demo: HumanDemo) -> dspy.Example:
    return dspy.Example(question=demo.question, reasoning_chain=demo_chains(demo)[0]).with_inputs("question")


def chain_question_demo(demo: HumanDemo) -> dspy.Example:
    first = demo.steps[0]
    return dspy.Example(triplet=triplet_text(first.action_input, first.action),
                        question=first.thought).with_inputs("triplet")


def chain_fill_demo(demo: HumanDemo) -> dspy.Example:
    masked, filled = demo_chains(demo)
    return dspy.Example(question=demo.question, reasoning_chain=masked,
                        filled_reasoning_chain=filled).with_inputs("question", "reasoning_chain")


def chain_recall_demo(demo: HumanDemo) -> dspy.Example:
    return dspy.Example(question=demo.question, answer=demo.response).with_inputs("question")


def chain_library() -> list[HumanDemo]:
    """Every Bamboogle record that gives a chain demo (103 of 125)."""
    from hqa.data.datasets import load_bamboogle

    return [d for d in map(chain_demo, load_bamboogle()) if d is not None]


class SSCoTArguments(Arguments):
    """:class:`SemiStructuredCoT`'s arguments (see its docstring); the sampling and retrieval sizes a serve request
    may set."""

    n_samples: int = arg(5, high=20, runtime=True)
    temperature: float = arg(0.7)
    k: int = arg(10, high=50, runtime=True)
    sources: str = arg(DEFAULT_SOURCES)
    min_masks: int = arg(MIN_MASKS, low=0)
    max_masks: int = arg(MAX_MASKS)
    kg_limit: int = arg(20, high=200, runtime=True)
    max_entities: int = arg(2, high=10, runtime=True)
    max_properties: int = arg(3, high=10, runtime=True)
    demos: str = arg("table4")
    grammar: bool = arg(False)
    dense_model: str = arg("")


class SemiStructuredCoT(Program):
    """SS-CoT: sampled + filtered + voted masked chain, filled by the steps of ``sources`` (see module docstring).

    ``min_masks`` / ``max_masks``: Appendix B's bounds on unique masks (2 and 4, its multi-hop QA setting).
    ``k``: passages per single-hop question (10, Appendix E).  ``dense_model``: ``""`` — the toolbox's dense
    retriever (the configured embedder, all-MiniLM-L6-v2 by default: a deviation); ``"contriever"`` —
    Contriever-msmarco as Appendix E, from the local Hugging Face cache (one clear error when it is not there),
    over the pack's passages (the same index DETLLM builds, kept on the toolbox).  ``demos``: ``"table4"`` (the paper's exemplars) or
    ``"none"`` (zero-shot ablation).  ``grammar``: hqa's option, not the paper's — the parse output carries
    :data:`~hqa.programs.sscot_chain.CHAIN_PATTERN` as a JSON-schema pattern, so under the JSONAdapter the embedded
    LM's grammar sampling can only write ``head >> relation >> tail; …; final answer: #…`` (the filter still checks
    mask counts, numbering and which slots are masked), and the parse call may write up to ``GRAMMAR_MAX_TOKENS``
    (640) tokens so the longest chain the pattern admits fits; off by default, as the paper samples unconstrained."""

    needs_toolbox = writes_sparql = per_question_demos = True
    Arguments = SSCoTArguments

    def __init__(self, n_samples: int = 5, temperature: float = 0.7, k: int = 10, toolbox=None,
                 sources: str = DEFAULT_SOURCES, min_masks: int = MIN_MASKS, max_masks: int = MAX_MASKS,
                 kg_limit: int = 20, max_entities: int = 2, max_properties: int = 3, demos: str = "table4",
                 grammar: bool = False, dense_model: str = ""):
        super().__init__()
        self.take_arguments(locals())
        if not 0 <= int(min_masks) <= int(max_masks):
            raise ConfigError(f"need 0 <= min_masks <= max_masks; got {min_masks}, {max_masks}")
        if demos not in ("table4", "none"):
            raise ConfigError(f"demos must be 'table4' or 'none'; got {demos!r}")
        self.sources = ",".join(parse_sources(sources))
        self.n_samples = int(n_samples)
        self.temperature = float(temperature)
        self.k = int(k)
        self.toolbox = toolbox
        self.min_masks, self.max_masks = int(min_masks), int(max_masks)
        self.kg_limit = int(kg_limit)
        self.max_entities = int(max_entities)
        self.max_properties = int(max_properties)
        self.grammar = bool(grammar)
        self.dense_model = resolve_dense_model(dense_model)
        self.parse = dspy.Predict(ParseChainConstrained if self.grammar else ParseChain)
        self.to_question = dspy.Predict(TripleToQuestion)
        self.read = dspy.Predict(AnswerFromContext)
        self.fill = dspy.Predict(FillChain)
        self.recall = dspy.Predict(RecallAnswer)
        if demos == "table4":
            for name, examples in load_exemplars().items():
                getattr(self, name).demos = list(examples)

    def human_demo_builders(self) -> dict[str, HumanDemoSpec]:
        """Bamboogle's gold decompositions as chain demos (:func:`chain_demo`, library :func:`chain_library`) for
        every predictor a decomposition can teach: ``parse``, ``to_question``, ``fill`` and the no-chain fallback
        ``recall``; ``read`` keeps Table 4's (Bamboogle has no passages).  ``labeled-human``, ``human+bootstrap``
        and per-question selection (``dpp-human`` …) all draw on this library."""
        builders = {"parse": chain_parse_demo, "to_question": chain_question_demo, "fill": chain_fill_demo,
                    "recall": chain_recall_demo}
        return {name: HumanDemoSpec(CHAIN_VARIANT, fn, library=chain_library) for name, fn in builders.items()}

    # -- 1. sample, filter, vote --------------------------------------------------------------------------------
    def sample_chains(self, question: str) -> list[dict[str, Any]]:
        """``n_samples`` parse calls, each a distinct LM request (own ``rollout_id``), each through the filter."""
        samples = []
        for i in range(self.n_samples):
            rec: dict[str, Any] = {"sample": i}
            config = {"temperature": self.temperature, "rollout_id": i}
            if self.grammar:  # room for the longest chain CHAIN_PATTERN admits, even one digit per token
                config["max_tokens"] = GRAMMAR_MAX_TOKENS
            out, error = safe_predict(self.parse, question=question, config=config)
            chain = "" if out is None or out.reasoning_chain is None else str(out.reasoning_chain).strip()
            if error is not None:
                rec["lm_error"] = error.message.splitlines()[0][:300]
            rec.update(chain=chain, errors=validate(chain, self.min_masks, self.max_masks), canonical=canonical(chain))
            samples.append(rec)
        return samples

    # -- 2a. Algorithm 1 ----------------------------------------------------------------------------------------
    def _ground_kg(self, tb, question: str, chain: Chain, index: int, state: dict[int, dict],
                   trace: Trace) -> dict[str, Any]:
        t = chain.triples[index]
        head = fill_text(t.head, _values(state))
        rec: dict[str, Any] = {"via": "kg", "ok": False, "triple": index, "head": head, "relation": t.relation}
        prior = state.get(mask_number(t.head))  # the head is exactly a mask a source filled
        if prior is not None and prior.get("ids"):
            ids = list(prior["ids"][: self.max_entities])
        else:
            cands = tb.linker.link(head, question, k=self.max_entities)
            trace.entities.extend(c.to_dict() for c in cands)
            ids = [c.id for c in cands if c.id.startswith("Q")]
        rec["entities"] = ids
        if not ids:
            return {**rec, "reason": "no entity"}
        props = tb.relations.link(t.relation, k=self.max_properties)
        rec["properties"] = [{"id": p, "label": lab, "score": s} for p, lab, s in props]
        if not props:
            return {**rec, "reason": "no property"}
        rec["queries"] = []
        for qid in ids:
            for pid, plabel, _ in props:
                query = KG_TAIL.format(qid=qid, pid=pid, limit=self.kg_limit)
                res = tb.sparql.run(query)
                trace.sparql.append(SparqlCall.from_dict(res.to_dict()))
                trace.tool_calls.append(ToolCall(tool="sparql", query=query, rows=len(res.rows), error=res.error))
                rec["queries"].append(query)
                raw = [row.get("x") or next(iter(row.values()), "") for row in res.rows] if res.ok else []
                raw = [v for v in dict.fromkeys(raw) if v]
                if not raw:
                    continue
                ent_ids = [W.local_id(v) for v in raw if W.local_id(v)]
                labels = tb.sparql.labels(ent_ids) if ent_ids else {}
                found = [((labels.get(W.local_id(v)) or tb.linker.label(W.local_id(v)) or W.local_id(v))
                          if W.local_id(v) else W.render_value(v)) for v in raw]
                head_label = labels.get(qid) or tb.linker.label(qid) or head
                trace.evidence.extend(Evidence(
                    text=f"{head_label} {plabel} {v}", source="sparql", score=1.0,
                    meta={"query": query, "entity": qid, "property": pid}).to_dict() for v in found)
                rec.update(ok=True, entity=qid, property=pid, sparql=query, values=found, ids=ent_ids)
                return rec
        return {**rec, "reason": "empty result"}

    # -- 2b. Algorithm 2 ----------------------------------------------------------------------------------------
    def _ground_text(self, tb, question: str, chain: Chain, index: int, state: dict[int, dict],
                     trace: Trace) -> dict[str, Any]:
        t = chain.triples[index]
        head = fill_text(t.head, _values(state))
        rec: dict[str, Any] = {"via": "text", "ok": False, "triple": index, "head": head, "relation": t.relation,
                               "triplet": triplet_text(head, t.relation)}
        out, error = safe_predict(self.to_question, triplet=rec["triplet"])
        trace.note(error)
        hop_q = clean_answer(out.question) if out is not None and out.question else ""
        rec["question"] = hop_q
        if not hop_q:
            return {**rec, "reason": "no question"}
        dense = tb.doc_index("text", "dense", self.dense_model) if self.dense_model else tb.dense
        passages = dense(hop_q, k=self.k)
        trace.tool_calls.append(ToolCall(tool="dense", query=hop_q, n=len(passages),
                                         **({"error": passages.error} if getattr(passages, "error", None) else {})))
        trace.passages.extend({**p.to_dict(), "mask": t.tail} for p in passages)
        rec["n_passages"] = len(passages)
        if not passages:
            return {**rec, "reason": "no passages"}
        out, error = safe_predict(self.read, context=[p.render() for p in passages], question=hop_q)
        trace.note(error)
        read = clean_answer(out.answer) if out is not None else ""
        rec["answer"] = read
        if is_unknown(read):
            return {**rec, "reason": "unknown"}
        trace.evidence.extend(p.to_dict() for p in passages)
        rec.update(ok=True, values=[read])
        return rec

    def run_source(self, source: str, tb, question: str, chain: Chain, state: dict[int, dict],
                   trace: Trace) -> dict[str, Any]:
        """One external source over the whole chain (SS-CoT Alg. 1 for ``kg``, Alg. 2 for ``text``): fill the
        valid triples not yet tried, again while fills make new triples valid."""
        ground = self._ground_kg if source == "kg" else self._ground_text
        tried: set[int] = set()
        step: dict[str, Any] = {"step": source, "rounds": 0, "tried": [], "filled": {}}
        while True:
            todo = [i for i in valid_triples(chain, _values(state)) if i not in tried]
            if not todo:
                break
            tried.update(todo)
            step["rounds"] += 1
            for i in todo:
                attempt = ground(tb, question, chain, i, state, trace)
                attempt["round"] = step["rounds"]
                step["tried"].append(i)
                trace.attempts.append(attempt)
                if not attempt["ok"]:
                    continue
                mask = mask_number(chain.triples[i].tail)
                fill = {"mask": f"#{mask}", "triple": i, "via": source, "value": attempt["values"][0],
                        "values": attempt["values"], "round": step["rounds"], "head": attempt["head"],
                        **{k: attempt[k] for k in ("ids", "sparql", "question") if k in attempt}}
                state[mask] = fill
                trace.fills.append(fill)
                step["filled"][fill["mask"]] = fill["value"]
        return step

    # -- 2c. parametric memory ----------------------------------------------------------------------------------
    def run_model(self, question: str, chain: Chain, state: dict[int, dict], trace: Trace) -> dict[str, Any]:
        """SS-CoT §3.2 "Use of Parametric Memory": the LM fills the remaining masks and the final answer."""
        values = _values(state)
        current = substitute(chain, values)
        step: dict[str, Any] = {"step": "model", "input": str(current), "filled": {}}
        if not open_masks(chain, values) and chain.final != ANSWER_MASK:
            step["skipped"] = "every mask filled and the final answer is a filled mask"
            return step
        out, error = safe_predict(self.fill, question=question, reasoning_chain=str(current))
        trace.note(error)
        text = "" if out is None or out.filled_reasoning_chain is None else str(out.filled_reasoning_chain).strip()
        step["output"] = text
        filled = try_parse(text)
        if filled is not None and len(filled.triples) == len(chain.triples):
            for i, t in enumerate(chain.triples):  # a slot that is exactly an open mask: head or tail
                for slot, got in ((t.head, filled.triples[i].head), (t.tail, filled.triples[i].tail)):
                    mask, value = mask_number(slot), clean_answer(got)
                    if mask is None or mask in state or not value or mask_numbers(value):
                        continue
                    fill = {"mask": f"#{mask}", "triple": i, "via": "lm", "value": value, "values": [value]}
                    state[mask] = fill
                    trace.fills.append(fill)
                    step["filled"][fill["mask"]] = value
        final = filled.final if filled is not None else (m.group(1) if (m := _FINAL_TEXT.search(text)) else text)
        # a final answer that still holds a numbered mask or ``#answer`` is no answer
        step["answer"] = "" if mask_numbers(final) or ANSWER_MASK in final else clean_answer(final)
        return step

    # -- 3. the program -----------------------------------------------------------------------------------------
    def forward(self, question: str) -> dspy.Prediction:
        sources = parse_sources(self.sources)
        tb = self.toolbox_or_fail() if set(sources) & {"kg", "text"} else None
        trace = new_trace("sscot", question)
        trace.add(SSCoTTrace(sources=list(sources), chains=[], valid_chains=[], voted_chain=None, votes=[],
                             attempts=[], fills=[], unfilled=[], filled_chain=None, fallback=None))

        samples = self.sample_chains(question)
        trace.chains = samples
        valid = [s for s in samples if not s["errors"]]
        trace.valid_chains = [s["chain"] for s in valid]
        trace.steps.append({"step": "parse", "n_samples": len(samples), "n_valid": len(valid),
                               "errors": dict(Counter(e for s in samples for e in s["errors"]))})
        if not valid:
            answer = ""
            if "model" in sources:
                out, error = safe_predict(self.recall, question=question)
                trace.note(error)
                answer = clean_answer(out.answer) if out is not None else ""
                trace.fallback = "recall"
                trace.answers.parametric = answer
            trace.steps.append({"step": "fallback", "reason": "no valid chain", "answer": answer})
            trace.answers.final = answer
            return dspy.Prediction(answer=answer, trace=trace.to_dict())

        result = vote([s["chain"] for s in valid])
        chain = parse_chain(valid[result.winner]["chain"])
        trace.voted_chain = str(chain)
        trace.voted_sample = valid[result.winner]["sample"]
        trace.votes = [{"chain": c, "count": n, "first_sample": valid[first]["sample"]}
                          for c, n, first in result.counts]
        trace.steps.append({"step": "vote", "chain": trace.voted_chain, "count": result.counts[0][1],
                               "n_valid": len(valid)})

        state: dict[int, dict] = {}
        model_answer = None
        for source in sources:
            if source == "model":
                step = self.run_model(question, chain, state, trace)
                model_answer = step.get("answer")
            else:
                step = self.run_source(source, tb, question, chain, state, trace)
            trace.steps.append(step)

        values = _values(state)
        trace.unfilled = [f"#{m}" for m in open_masks(chain, values)]
        trace.filled_chain = str(substitute(chain, values))
        final_mask = mask_number(chain.final)
        if final_mask is None:
            final_mask = mask_number(chain.triples[-1].tail)
        final_fill = state.get(final_mask) if final_mask is not None else None
        if final_fill is not None:
            setattr(trace.answers, ANSWER_KEY[final_fill["via"]], final_fill["value"])
        if model_answer:
            trace.answers.parametric = model_answer
        answer = model_answer or (final_fill["value"] if final_fill is not None else "")
        trace.steps.append({"step": "answer", "answer": answer})
        trace.answers.final = answer
        return dspy.Prediction(answer=answer, trace=trace.to_dict())


__all__ = ["SemiStructuredCoT", "chain_demo", "chain_library", "decomposition_chain", "demo_chains", "is_unknown",
           "load_exemplars", "parse_sources", "triplet_text"]
