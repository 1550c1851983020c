"""The first hybrid program: a closed-book answer plus one retrieval hop over text, triples and SPARQL.

Path: question → parametric answer (LM) → one hop of :class:`hqa.retrievers.hop.HopRetriever`: entity spotting,
one-hop SPARQL around the spotted entities, dense passages, BM25 over linearized triples, dedupe, rerank → answer
(LM).

``memory`` says when the closed-book (parametric) answer is asked for: ``always`` (first, for every question: it
is shown and scored as the program's memory answer; its LM call does not wait for the hop, which runs meanwhile,
so a question's wall time holds the longer of the two, not their sum), or ``fallback`` — only when the answer needs
it (free mode, or no candidate in the evidence), so a grounded answer with ``choices = 1`` costs no LM call at all.

The answer step has two modes (``answer_mode``, default from ``programs.answer_mode``): ``grounded`` — candidate
answers are drawn from the ``pool`` best reranked evidence items and ranked (:mod:`hqa.answering.candidates`), and the
LM picks one of the ``choices`` best (default ``programs.choices``), each shown with the evidence it came from (a
``Literal``-typed output that the embedded llama.cpp engine decodes under a grammar; ``choices = 1`` takes the
best-ranked candidate without asking),
falling back to free text when the evidence offers no candidate; ``free`` — a free-text answer from the ``k`` kept
evidence items.  ``auto`` is grounded for the embedded LM only.

``abstain`` (default ``programs.abstain``; ``auto`` = on for the embedded LM, off for remote ones): in grounded mode,
selective answering (:mod:`hqa.answering.selective`, hqa's own addition, not a paper's): the best candidate is given
only when it is of the kind the question asks for and its calibrated confidence reaches the threshold of
``hqa/data/abstain.json`` (fitted on ``compmix/train`` only by ``benchmarks/calibrate_abstain.py``); otherwise —
and when the evidence offers no candidate, without asking the LM — the prediction's ``answer`` is empty and it
carries ``abstained``, ``reason`` and the ``candidates`` with their evidence.  Left unset it is resolved from the
settings when the program is opened (:func:`hqa.app.open_program`), so the shipped compiled program gets it without
recompiling.
"""

from __future__ import annotations

from concurrent.futures import wait
from typing import Literal, Optional

import dspy

from hqa.scoring.answers import clean_answer
from hqa.programs.arguments import ABSTAIN_MODE, ANSWER_MODE, RANKER_MODE, Arguments, arg
from hqa.programs.base import Program
from hqa.lm.calls import beside, safe_predict
from hqa.answering import ranker as learned
from hqa.answering.candidates import AnswerCandidate
from hqa.answering.grounded import candidate_lines, choose, resolved
from hqa.retrievers.hop import HopRequest, HopResult, HopRetriever
from hqa.answering.selective import Decision, decide
from hqa.signatures.basic import ClosedBookAnswer, EvidenceAnswer
from hqa.signatures.grounded import GroundedAnswer
from hqa.schemas.trace import SparqlCall, Trace, new_trace

MEMORY = ("always", "fallback")  # when the closed-book answer is asked for (see the module docstring)


class SimpleArguments(Arguments):
    """:class:`SimpleHybrid`'s arguments (see the module docstring); every one a serve request may set."""

    k: int = arg(6, high=50, runtime=True)
    hop_limit: int = arg(30, high=200, runtime=True)
    max_entities: int = arg(2, high=10, runtime=True)
    answer_mode: ANSWER_MODE = arg(None, runtime=True, setting="answer_mode")
    pool: int = arg(30, high=100, runtime=True)
    choices: Optional[int] = arg(None, low=1, high=20, runtime=True, setting="choices")
    memory: Literal[MEMORY] = arg("always", runtime=True)  # type: ignore[valid-type]
    abstain: ABSTAIN_MODE = arg(None, runtime=True, setting="abstain")
    ranker: RANKER_MODE = arg(None, runtime=True, setting="ranker")


class SimpleHybrid(Program):
    """Closed-book answer + one hop of multi-source retrieval, then an evidence-grounded answer."""

    needs_toolbox = True
    Arguments = SimpleArguments

    def __init__(self, k: int = 6, hop_limit: int = 30, max_entities: int = 2, toolbox=None,
                 answer_mode: str | None = None, pool: int = 30, choices: int | None = None,
                 memory: str = "always", abstain: str | None = None, ranker: str | None = None):
        super().__init__()
        args = self.take_arguments(locals())
        self.memory = memory
        self.abstain = args["abstain"]  # None until resolved: programs.abstain of the settings
        self.ranker = args["ranker"]  # None until resolved: programs.ranker of the settings
        self.k = k
        self.pool = pool
        self.choices = args["choices"]  # None until resolved: programs.choices of the settings
        self.answer_mode = args["answer_mode"]  # None until resolved: programs.answer_mode of the settings
        self.hop_limit = hop_limit
        self.max_entities = max_entities
        self.toolbox = toolbox
        self.parametric = dspy.Predict(ClosedBookAnswer)
        self.answer = dspy.Predict(EvidenceAnswer)
        self.choose = dspy.Predict(GroundedAnswer)

    def forward(self, question: str) -> dspy.Prediction:
        tb = self.toolbox_or_fail()
        trace = new_trace("simple", question)
        # the closed-book answer does not depend on the evidence: its LM call runs while the hop retrieves, and is
        # recorded first, as it is asked first
        memory = beside(self._memory_call, question) if self.memory == "always" else None
        try:
            hop = self.retrieve(question)
        finally:  # a failed hop still waits for the call, so nothing of this question runs on after it
            if memory is not None:
                wait([memory])
        param = self._record_memory(trace, *memory.result()) if memory is not None else None
        ranked = hop.kept[: self.k]
        trace.entities = [c.to_dict() for c in hop.entities]
        trace.sparql.extend(SparqlCall.from_dict(res.to_dict()) for res in hop.sparql_results)
        trace.retrieval_ms = hop.retrieval_ms
        trace.passages = [e.to_dict() for e in hop.passages]
        trace.triples = [e.to_dict() for e in hop.triples]
        trace.evidence = [e.to_dict() for e in ranked]
        if hop.source_errors:  # a source that could not answer (an outage), never just an empty list
            trace.source_errors = hop.source_errors
        trace.steps.append({"step": "retrieve", "entities": [c.id for c in hop.entities],
                               "n_passages": len(hop.passages), "n_triples": len(hop.triples),
                               "n_sparql_rows": len(hop.kg_items), "kept": len(ranked)})

        mode = resolved(self, "answer_mode")
        rendered = [e.render() for e in ranked]
        choices = resolved(self, "choices")
        model = None
        if mode == "grounded":  # an abstention shows the 3 best
            ranked_all, model = self.rank(question, hop, max(choices, 3), trace)
        else:
            ranked_all = []
        ranked_candidates = ranked_all[:choices]
        candidates = [c.text for c in ranked_candidates]
        trace.answer_mode = mode
        trace.candidates = candidates
        trace.candidate_support = [c.to_dict() for c in ranked_candidates]
        if mode == "grounded" and resolved(self, "abstain") == "on":
            decision = self._decide(tb, trace, question, ranked_all, model)
            if decision.abstained:
                trace.steps.append({"step": "abstain", "reason": decision.reason})
                trace.answers.final = ""
                shown = [c.to_dict() for c in ranked_all[:3]]
                return dspy.Prediction(answer="", abstained=True, reason=decision.reason,
                                       confidence=decision.confidence, candidates=shown, trace=trace.to_dict())
        if len(candidates) == 1:
            final = candidates[0]
        elif candidates:
            picked, error = choose(self.choose, candidates, shown=candidate_lines(ranked_candidates),
                                   question=question)
            trace.note(error)
            final = picked if picked is not None else candidates[0]  # unparsable reply: the best-ranked one
        else:
            if param is None:
                param = self._ask_memory(trace, question)
            out, error = safe_predict(self.answer, question=question, evidence=rendered, parametric_answer=param)
            trace.note(error)
            final = clean_answer(out.answer) if out is not None else param  # unparsable reply: keep the memory answer
        trace.steps.append({"step": "answer", "answer": final, "mode": mode, "candidates": len(candidates)})
        trace.answers.final = final
        sel = trace.selective or {}
        return dspy.Prediction(answer=final, abstained=False, reason=None, confidence=sel.get("confidence"),
                               candidates=trace.candidate_support, trace=trace.to_dict())

    def retrieve(self, question: str) -> HopResult:
        """The one hop this program runs for ``question`` (what ``hqa train ranker`` trains on, too)."""
        return HopRetriever(self.toolbox_or_fail()).run(
            question, HopRequest(searches=[question], triple_queries=[question], spot=self.max_entities,
                                 neighbourhood_limit=self.hop_limit),
            k=max(self.k, self.pool), k_per_source=max(self.k, 10))

    def featurize(self, question: str, hop: HopResult, cross: bool = False) -> learned.Featurized:
        """The candidates of ``hop``'s ``pool`` best items with the learned ranker's features (with ``cross``, the
        cross-encoder reranker's scores of each candidate too)."""
        return learned.featurize_with(self.toolbox_or_fail(), question, hop.kept[: self.pool], hop.entities, cross)

    def rank(self, question: str, hop: HopResult, n: int,
             trace: Trace) -> tuple[list[AnswerCandidate], learned.RankerModel | None]:
        """The ``n`` best candidates of ``hop``, by the learned ranker for the reranker that ran (``ranker =
        learned``; by hand when there is none for it, said in the trace) or by the hand-set weights
        (:func:`hqa.answering.ranker.rank_pool`); and the learned model that ranked them, if one did."""
        ranked, trace.ranker, model = learned.rank_pool(question, hop.kept[: self.pool], entities=hop.entities,
                                                        toolbox=self.toolbox_or_fail(), n=n,
                                                        mode=resolved(self, "ranker"))
        return ranked, model

    def _decide(self, tb, trace: Trace, question: str, ranked: list,
                model: learned.RankerModel | None = None) -> Decision:
        """Answer or abstain (:func:`hqa.answering.selective.decide`, with the learned ranker's calibration when it
        ranked), recorded in the trace (``selective``)."""
        sparql, linker = learned.typing_parts(tb)
        where = tb.evidence_from() if hasattr(tb, "evidence_from") else "the knowledge pack"  # a stand-in toolbox
        decision = decide(question, ranked, sparql, model=model.calibration if model else None, linker=linker,
                          world=where)
        trace.selective = {**decision.to_dict(), "ranker": "learned" if model else "hand"}
        return decision

    def _ask_memory(self, trace: Trace, question: str) -> str:
        """The closed-book (parametric) answer, recorded in the trace."""
        return self._record_memory(trace, *self._memory_call(question))

    def _memory_call(self, question: str):
        return safe_predict(self.parametric, question=question)

    @staticmethod
    def _record_memory(trace: Trace, out, error) -> str:
        trace.note(error)
        param = clean_answer(out.answer) if out is not None else ""
        trace.answers.parametric = param
        trace.steps.append({"step": "parametric", "answer": param})
        return param
