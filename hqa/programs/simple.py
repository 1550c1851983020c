"""The first hybrid program: a closed-book answer plus one retrieval hop over text, triples and SPARQL.

Path: question → parametric answer (LM) → entity spotting → one-hop SPARQL around the linked entities, dense
passages, BM25 over linearized triples → rerank → answer (LM).  Two LM calls per question.

The answer step has two modes (``answer_mode``, default from ``programs.answer_mode``): ``grounded`` — the LM picks
one of the candidate answers drawn from the kept evidence (:mod:`hqa.programs.grounded`; a ``Literal``-typed output
that the embedded llama.cpp engine decodes under a grammar), falling back to free text when the evidence offers no
candidate; ``free`` — a free-text answer from the evidence.  ``auto`` is grounded for the embedded LM only.
"""

from __future__ import annotations

import time

import dspy

from hqa.data import wikidata as W
from hqa.programs.common import clean_answer, new_trace, safe_predict
from hqa.programs.grounded import choose, evidence_candidates, resolve_answer_mode
from hqa.retrievers.base import Evidence
from hqa.retrievers.registry import get_toolbox
from hqa.retrievers.sparql import SparqlResult
from hqa.signatures.basic import ClosedBookAnswer, EvidenceAnswer
from hqa.signatures.grounded import GroundedAnswer

from hqa.retrievers.neighbourhood import ONE_HOP  # noqa: E402 - the one-hop neighbourhood query


def one_hop_evidence(result: SparqlResult, subject: str, labels: dict[str, str]) -> list[Evidence]:
    """Rows of a one-hop query → ``subject relation object`` evidence with labels resolved."""
    out = []
    for row in result.rows:
        pid = W.local_id(row.get("p", "")) or row.get("p", "")
        obj = row.get("o", "")
        oid = W.local_id(obj)
        o_text = labels.get(oid, oid) if oid else obj.split("T00:00:00")[0]
        p_text = labels.get(pid, pid)
        out.append(Evidence(text=f"{labels.get(subject, subject)} {p_text} {o_text}", source="sparql", score=1.0,
                            meta={"query": result.query, "s": subject, "p": pid, "o": oid or obj,
                                  "s_label": labels.get(subject, subject), "o_label": o_text}))
    return out


class SimpleHybrid(dspy.Module):
    """Closed-book answer + one hop of multi-source retrieval, then an evidence-grounded answer."""

    #: per-call options (``hqa serve``'s ``options``): read at forward time, so a copy with other values is safe
    runtime_options = {"k": (int, 1, 50), "hop_limit": (int, 1, 200), "max_entities": (int, 1, 10),
                       "answer_mode": (str, ("auto", "grounded", "free"))}

    def __init__(self, k: int = 6, hop_limit: int = 30, max_entities: int = 2, toolbox: str = "default",
                 answer_mode: str | None = None):
        super().__init__()
        self.k = k
        self.answer_mode = answer_mode  # None: programs.answer_mode of the toolbox's settings
        self.hop_limit = hop_limit
        self.max_entities = max_entities
        self.toolbox = toolbox
        self.parametric = dspy.Predict(ClosedBookAnswer)
        self.answer = dspy.Predict(EvidenceAnswer)
        self.choose = dspy.Predict(GroundedAnswer)

    def forward(self, question: str) -> dspy.Prediction:
        tb = get_toolbox(self.toolbox)
        trace = new_trace("simple", question)
        out = safe_predict(self.parametric, trace, question=question)
        param = clean_answer(out.answer) if out is not None else ""
        trace["answers"]["parametric"] = param
        trace["steps"].append({"step": "parametric", "answer": param})

        t0 = time.monotonic()
        entities = tb.linker.spot(question, k=self.max_entities)
        trace["entities"] = [c.to_dict() for c in entities]
        kg_items: list[Evidence] = []
        for cand in entities:
            res = tb.sparql.run(ONE_HOP.format(qid=cand.id, limit=self.hop_limit))
            trace["sparql"].append(res.to_dict())
            ids = [cand.id] + [W.local_id(v) for row in res.rows for v in row.values() if W.local_id(v)]
            labels = tb.sparql.labels(sorted(set(ids)))
            kg_items.extend(one_hop_evidence(res, cand.id, labels))
        passages = tb.dense(question, k=self.k)
        triples = tb.bm25(question, k=self.k)
        pool = passages + triples + kg_items
        ranked = tb.reranker.rerank(question, pool, k=self.k) if pool else []
        trace["retrieval_ms"] = round((time.monotonic() - t0) * 1000, 1)
        trace["passages"] = [e.to_dict() for e in passages]
        trace["triples"] = [e.to_dict() for e in triples]
        trace["evidence"] = [e.to_dict() for e in ranked]
        errors = {name: hits.error for name, hits in (("text", passages), ("triples", triples))
                  if getattr(hits, "error", None)}
        if errors:  # a source that could not answer (an outage), never just an empty list
            trace["source_errors"] = errors
        trace["steps"].append({"step": "retrieve", "entities": [c.id for c in entities], "n_passages": len(passages),
                               "n_triples": len(triples), "n_sparql_rows": len(kg_items), "kept": len(ranked)})

        mode = resolve_answer_mode(self.answer_mode, tb.settings)
        rendered = [e.render() for e in ranked]
        candidates = evidence_candidates(question, ranked) if mode == "grounded" else []
        trace["answer_mode"] = mode
        trace["candidates"] = candidates
        if candidates:
            picked = choose(self.choose, trace, candidates, question=question, evidence=rendered,
                            parametric_answer=param)
            final = picked if picked is not None else param  # unparsable reply: keep the memory answer
        else:
            out = safe_predict(self.answer, trace, question=question, evidence=rendered, parametric_answer=param)
            final = clean_answer(out.answer) if out is not None else param  # unparsable reply: keep the memory answer
        trace["steps"].append({"step": "answer", "answer": final, "mode": mode, "candidates": len(candidates)})
        trace["answers"]["final"] = final
        return dspy.Prediction(answer=final, trace=trace)
