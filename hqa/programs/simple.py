"""The first hybrid program: a closed-book answer plus one retrieval hop over text, triples and SPARQL.

Path: question → parametric answer (LM) → one hop of :class:`hqa.retrievers.hop.HopRetriever`: entity spotting,
one-hop SPARQL around the spotted entities, dense passages, BM25 over linearized triples, dedupe, rerank → answer
(LM).  Two LM calls per question.

The answer step has two modes (``answer_mode``, default from ``programs.answer_mode``): ``grounded`` — the LM picks
one of the candidate answers drawn from the kept evidence (:mod:`hqa.programs.grounded`; a ``Literal``-typed output
that the embedded llama.cpp engine decodes under a grammar), falling back to free text when the evidence offers no
candidate; ``free`` — a free-text answer from the evidence.  ``auto`` is grounded for the embedded LM only.
"""

from __future__ import annotations

import dspy

from hqa.programs.common import clean_answer, new_trace, safe_predict
from hqa.programs.grounded import choose, evidence_candidates, resolve_answer_mode
from hqa.retrievers.hop import HopRequest, HopRetriever
from hqa.retrievers.registry import get_toolbox
from hqa.signatures.basic import ClosedBookAnswer, EvidenceAnswer
from hqa.signatures.grounded import GroundedAnswer

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

        hop = HopRetriever(tb).run(question, HopRequest(searches=[question], triple_queries=[question],
                                                        spot=self.max_entities, neighbourhood_limit=self.hop_limit),
                                   k=self.k, k_per_source=self.k)
        ranked = hop.kept
        trace["entities"] = [c.to_dict() for c in hop.entities]
        trace["sparql"].extend(res.to_dict() for res in hop.sparql_results)
        trace["retrieval_ms"] = hop.retrieval_ms
        trace["passages"] = [e.to_dict() for e in hop.passages]
        trace["triples"] = [e.to_dict() for e in hop.triples]
        trace["evidence"] = [e.to_dict() for e in ranked]
        if hop.source_errors:  # a source that could not answer (an outage), never just an empty list
            trace["source_errors"] = hop.source_errors
        trace["steps"].append({"step": "retrieve", "entities": [c.id for c in hop.entities],
                               "n_passages": len(hop.passages), "n_triples": len(hop.triples),
                               "n_sparql_rows": len(hop.kg_items), "kept": len(ranked)})

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
