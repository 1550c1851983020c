"""Semi-Structured Chain-of-Thought (Su et al. 2023): parse the question into a masked triple chain, then fill the
masks from the knowledge graph, else from text, else from the LM's memory.

Path: sample ``n_samples`` chains (``ParseChain`` at ``temperature``, one LM call per sample, each with its own
``rollout_id`` so none is a cache hit of another) → drop chains the syntactic filter rejects
(:func:`hqa.programs.sscot_chain.validate`) → self-consistency vote over canonical forms (ties: earliest sample) →
fill the voted chain's masks in :func:`~hqa.programs.sscot_chain.fill_order`, each mask by the first source that
gives a value:

* ``kg`` — link the triple's known side (a filled mask reuses its KG ids; text goes through the entity linker) and
  its relation (:class:`hqa.retrievers.relations.RelationLinker`), then a one-hop SPARQL query
  (``wd:Q wdt:P ?x`` when the tail is the mask, ``?x wdt:P wd:Q`` when the head is) through ``toolbox.sparql.run``;
  the first non-empty result over the top entity × property candidates wins;
* ``text`` — the triple as a single-hop question, dense passages, ``ReadHop``; an empty or "unknown" reading (or no
  passages at all) falls through;
* ``lm`` — ``RecallHop`` on the single-hop question (always gives a value).

Finally ``ChainAnswer`` answers the question from the filled chain.  With no valid chain, ``RecallHop`` answers the
whole question (``trace["fallback"] = "recall"``).

Trace (besides :func:`hqa.programs.common.new_trace`'s keys): ``chains`` (every sample with its errors),
``valid_chains``, ``voted_chain``, ``votes``, ``fill_order``, ``fills`` (per mask, in fill order:
``{mask, triple, via, value, values, ids?, sparql?, question?, attempts}``), ``unfilled``, ``filled_chain``,
``fallback``.  ``answers.kg`` / ``answers.text`` / ``answers.parametric`` hold the value of the last filled mask
under the source that filled it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from hqa.data import wikidata as W
from hqa.metrics import is_empty_answer
from hqa.programs.common import clean_answer, new_trace, safe_predict
from hqa.programs.sscot_chain import (
    Triple, canonical, fill_order, format_chain, mask_number, masks, parse_chain, renumber, validate, vote,
)
from hqa.retrievers.base import Evidence
from hqa.retrievers.registry import get_toolbox
from hqa.retrievers.relations import relation_linker_for
from hqa.signatures.sscot import ChainAnswer, ParseChain, ReadHop, RecallHop

KG_TAIL = "SELECT DISTINCT ?x WHERE {{ wd:{qid} wdt:{pid} ?x . }} LIMIT {limit}"
KG_HEAD = "SELECT DISTINCT ?x WHERE {{ ?x wdt:{pid} wd:{qid} . }} LIMIT {limit}"

ANSWER_KEY = {"kg": "kg", "text": "text", "lm": "parametric"}



def is_unknown(answer: Any) -> bool:
    """An empty or "I don't know"-style reading."""
    return is_empty_answer(clean_answer(answer))


def hop_question(relation: str, known: str, mask_pos: str) -> str:
    """A triple with one unknown as a single-hop question."""
    if mask_pos == "tail":
        return f"What is the {relation} of {known}?"
    return f"Who or what has {relation} {known}?"


def literal_text(value: str) -> str:
    """A KG literal for display: ISO datetimes → their date."""
    return W.render_value(value)


class SemiStructuredCoT(dspy.Module):
    """Sampled + voted semi-structured chain, masks filled KG → text → LM, answer from the filled chain."""

    #: per-call options (``hqa serve``'s ``options``): read at forward time, so a copy with other values is safe
    runtime_options = {"n_samples": (int, 1, 20), "k": (int, 1, 50), "kg_limit": (int, 1, 200),
                       "max_entities": (int, 1, 10), "max_properties": (int, 1, 10)}

    def __init__(self, n_samples: int = 5, temperature: float = 0.7, k: int = 5, toolbox: str = "default",
                 kg_limit: int = 20, max_entities: int = 2, max_properties: int = 3):
        super().__init__()
        self.n_samples = n_samples
        self.temperature = temperature
        self.k = k
        self.toolbox = toolbox
        self.kg_limit = kg_limit
        self.max_entities = max_entities
        self.max_properties = max_properties
        self.parse = dspy.Predict(ParseChain)
        self.read = dspy.Predict(ReadHop)
        self.recall = dspy.Predict(RecallHop)
        self.answer = dspy.Predict(ChainAnswer)

    # -- 1. sample and filter ----------------------------------------------------------------------------------
    def sample_chains(self, question: str) -> list[dict[str, Any]]:
        """``n_samples`` parse calls, each a distinct LM request (own ``rollout_id``), each validated."""
        samples = []
        for i in range(self.n_samples):
            rec: dict[str, Any] = {"sample": i}
            try:
                out = self.parse(question=question, config={"temperature": self.temperature, "rollout_id": i})
                chain = "" if out.chain is None else str(out.chain)
            except AdapterParseError as exc:
                chain = ""
                rec["lm_error"] = str(exc).splitlines()[0][:300]
            rec["chain"] = chain
            rec["errors"] = validate(chain)
            rec["canonical"] = canonical(chain)
            samples.append(rec)
        return samples

    # -- 2. fill one mask --------------------------------------------------------------------------------------
    def _fill_kg(self, tb, question: str, triple: Triple, mask_pos: str, known: str, known_rec: dict | None,
                 trace: dict) -> dict[str, Any]:
        attempt: dict[str, Any] = {"via": "kg", "ok": False}
        if known_rec is not None and known_rec.get("ids"):
            ids = list(known_rec["ids"][: self.max_entities])
            attempt["entities"] = ids
        else:
            cands = tb.linker.link(known, question, k=self.max_entities)
            trace["entities"].extend(c.to_dict() for c in cands)
            ids = [c.id for c in cands if c.id.startswith("Q")]
            attempt["entities"] = ids
        if not ids:
            attempt["reason"] = "no entity"
            return attempt
        props = relation_linker_for(tb).link(triple.relation, k=self.max_properties)
        attempt["properties"] = [{"id": p, "label": lab, "score": s} for p, lab, s in props]
        if not props:
            attempt["reason"] = "no property"
            return attempt
        attempt["queries"] = []
        for qid in ids:
            for pid, plabel, _ in props:
                query = (KG_TAIL if mask_pos == "tail" else KG_HEAD).format(qid=qid, pid=pid, limit=self.kg_limit)
                res = tb.sparql.run(query)
                trace["sparql"].append(res.to_dict())
                trace["tool_calls"].append({"tool": "sparql", "query": query, "rows": len(res.rows),
                                            "error": res.error})
                attempt["queries"].append(query)
                if not res.ok or not res.rows:
                    continue
                raw = [row.get("x") or next(iter(row.values()), "") for row in res.rows]
                raw = [v for v in dict.fromkeys(raw) if v]
                if not raw:
                    continue
                ent_ids = [W.local_id(v) for v in raw if W.local_id(v)]
                labels = tb.sparql.labels(ent_ids) if ent_ids else {}
                values = []
                for v in raw:
                    lid = W.local_id(v)
                    values.append((labels.get(lid) or tb.linker.label(lid) or lid) if lid else literal_text(v))
                known_label = labels.get(qid) or tb.linker.label(qid) or known
                for v in values:
                    trace["evidence"].append(Evidence(
                        text=f"{known_label} {plabel} {v}" if mask_pos == "tail" else f"{v} {plabel} {known_label}",
                        source="sparql", score=1.0, meta={"query": query, "entity": qid, "property": pid},
                    ).to_dict())
                attempt.update(ok=True, entity=qid, property=pid, sparql=query, values=values, ids=ent_ids)
                return attempt
        attempt["reason"] = "empty result"
        return attempt

    def fill_mask(self, tb, question: str, index: int, triple: Triple, mask: int, filled: dict[int, dict],
                  trace: dict) -> dict[str, Any]:
        """Fill ``#mask`` from ``triple``: KG, else text, else LM.  Returns the fill record."""
        mask_pos = "tail" if mask_number(triple.tail) == mask else "head"
        known_slot = triple.head if mask_pos == "tail" else triple.tail
        known_mask = mask_number(known_slot)
        known_rec = filled.get(known_mask) if known_mask is not None else None
        known = (known_rec.get("values") or [known_rec["value"]])[0] if known_rec else known_slot
        rec: dict[str, Any] = {"mask": f"#{mask}", "triple": str(triple), "triple_index": index,
                               "position": mask_pos, "known": known, "via": None, "value": None, "values": [],
                               "attempts": []}

        kg = self._fill_kg(tb, question, triple, mask_pos, known, known_rec, trace)
        rec["attempts"].append(kg)
        if kg["ok"]:
            rec.update(via="kg", values=kg["values"], value=" | ".join(kg["values"]), ids=kg["ids"],
                       sparql=kg["sparql"])
            return rec

        hop_q = hop_question(triple.relation, known, mask_pos)
        rec["question"] = hop_q
        passages = tb.dense(hop_q, k=self.k)
        trace["tool_calls"].append({"tool": "dense", "query": hop_q, "n": len(passages),
                                    **({"error": passages.error} if getattr(passages, "error", None) else {})})
        trace["passages"].extend({**p.to_dict(), "mask": f"#{mask}"} for p in passages)
        text_attempt: dict[str, Any] = {"via": "text", "ok": False, "n_passages": len(passages)}
        rec["attempts"].append(text_attempt)
        if passages:
            out = safe_predict(self.read, trace, question=hop_q, passages=[p.render() for p in passages])
            read = clean_answer(out.answer) if out is not None else ""
            text_attempt["answer"] = read
            if not is_unknown(read):
                text_attempt["ok"] = True
                trace["evidence"].extend(p.to_dict() for p in passages)
                rec.update(via="text", value=read, values=[read])
                return rec
            text_attempt["reason"] = "reader found no answer"
        else:
            text_attempt["reason"] = "no passages"

        out = safe_predict(self.recall, trace, question=hop_q)
        recalled = clean_answer(out.answer) if out is not None else ""
        rec["attempts"].append({"via": "lm", "ok": True, "answer": recalled})
        rec.update(via="lm", value=recalled, values=[recalled])
        return rec

    # -- 3. the program ----------------------------------------------------------------------------------------
    def forward(self, question: str) -> dspy.Prediction:
        tb = get_toolbox(self.toolbox)
        trace = new_trace("sscot", question)
        trace.update(chains=[], valid_chains=[], voted_chain=None, votes=[], fill_order=[], fills=[], unfilled=[],
                     filled_chain=[], fallback=None)

        samples = self.sample_chains(question)
        trace["chains"] = samples
        valid = [s for s in samples if not s["errors"]]
        trace["valid_chains"] = [s["chain"] for s in valid]
        errors = Counter(e for s in samples for e in s["errors"])
        trace["steps"].append({"step": "parse", "n_samples": len(samples), "n_valid": len(valid),
                               "errors": dict(errors)})

        if not valid:
            out = safe_predict(self.recall, trace, question=question)
            answer = clean_answer(out.answer) if out is not None else ""
            trace["fallback"] = "recall"
            trace["steps"].append({"step": "fallback", "reason": "no valid chain", "answer": answer})
            trace["answers"]["parametric"] = trace["answers"]["final"] = answer
            return dspy.Prediction(answer=answer, trace=trace)

        result = vote([s["chain"] for s in valid])
        triples = renumber(parse_chain(valid[result.winner]["chain"]))
        trace["voted_chain"] = format_chain(triples)
        trace["voted_sample"] = valid[result.winner]["sample"]
        trace["votes"] = [{"chain": c, "count": n, "first_sample": valid[first]["sample"]}
                          for c, n, first in result.counts]
        trace["steps"].append({"step": "vote", "chain": trace["voted_chain"], "count": result.counts[0][1],
                               "n_valid": len(valid)})

        order = fill_order(triples)
        trace["fill_order"] = [{"triple": i, "mask": f"#{m}"} for i, m in order]
        filled: dict[int, dict] = {}
        for i, m in order:
            rec = self.fill_mask(tb, question, i, triples[i], m, filled, trace)
            filled[m] = rec
            trace["fills"].append(rec)
            trace["steps"].append({"step": "fill", "mask": rec["mask"], "via": rec["via"], "value": rec["value"]})
        trace["unfilled"] = [f"#{m}" for m in masks(triples) if m not in filled]

        filled_chain = [str(_substitute(t, filled)) for t in triples]
        trace["filled_chain"] = filled_chain
        if order:
            last = filled[order[-1][1]]
            trace["answers"][ANSWER_KEY[last["via"]]] = last["value"]

        out = safe_predict(self.answer, trace, question=question, filled_chain=filled_chain)
        # an unparsable final reply: the value of the last filled mask is the chain's answer
        answer = clean_answer(out.answer) if out is not None else (filled[order[-1][1]]["value"] if order else "")
        trace["steps"].append({"step": "answer", "answer": answer})
        trace["answers"]["final"] = answer
        return dspy.Prediction(answer=answer, trace=trace)


def _substitute(triple: Triple, filled: dict[int, dict]) -> Triple:
    def slot(s: str) -> str:
        n = mask_number(s)
        return filled[n]["value"] if n is not None and n in filled and filled[n]["value"] else s

    return Triple(slot(triple.head), triple.relation, slot(triple.tail))


__all__ = ["SemiStructuredCoT", "hop_question", "is_unknown"]
