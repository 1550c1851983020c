"""HumanIQ's final response generation (HumanIQ §3): the parametric answer, then one merge of the per-source
answers — the ending the agent, the static pipeline and late fusion share (:class:`SourceMerge`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import dspy

from hqa.scoring.answers import answer_or_none, clean_answer
from hqa.answering import ranker as learned
from hqa.answering.candidates import fold
from hqa.lm.calls import safe_predict
from hqa.answering.grounded import candidate_lines, choose, resolved
from hqa.schemas.trace import MergeTrace

#: in grounded mode a memory answer longer than this is not the short answer the signature asks for, and is no
#: merge candidate (a 135M model sometimes writes a paragraph)
MAX_MEMORY_WORDS = 12


@dataclass
class Merged:
    """What :class:`SourceMerge` answered: the final answer, the per-source answers it used (grounded or as
    written; ``parametric`` None when memory gave none) and its part of the trace."""

    answer: str
    text: str | None
    kg: str | None
    parametric: str | None
    trace: MergeTrace = field(default_factory=MergeTrace)


class SourceMerge(dspy.Module):
    """HumanIQ's final response generation (HumanIQ §3), shared by the agent, the static pipeline and late fusion:
    the LM's own (parametric) answer to the question, then one LM request that reads the question, the parametric
    answer and the workflow response — the per-source answers and ``context``, the workflow's assistant response
    (evidence obtained and thoughts) — and writes the final answer.  Its demos are the benchmark's merge few-shots,
    complete with their Context (``hqa.data.human.load_merge_examples``; the authors' code shows all of a
    benchmark's examples, 5 / 6 / 7).

    That free-text merge is the method (``programs.answer_mode = free``, and ``auto`` with a remote LM).  Grounded
    answering is an option for small models (``auto`` with the embedded LM; kept because a 135M model's free text is
    rarely an answer the evidence names), not the merge's definition:

    In grounded mode the merge reads the same inputs — the answers the agent wrote, never replaced — but its answer
    is constrained to a choice (a ``Literal``; no LM call for a single one) among the distinct candidates: the
    agent's per-source answers, each source's best candidate from its ``evidence`` (:meth:`ground`), and the memory
    answer (dropped when longer than :data:`MAX_MEMORY_WORDS` words).  Without ``use_merge`` (or when the reply is
    unparsable) the first source that answered wins, text before KG before memory."""

    def __init__(self, choices: int | None = None, answer_mode: str | None = None, ranker: str = "hand"):
        """``choices`` and ``answer_mode`` (``grounded`` / ``free``): the program's arguments, resolved from the
        settings when the program was opened (:func:`hqa.app.open_program`); the merge never reads the settings.
        ``ranker``: how a source's candidates are ranked in grounded mode — ``hand`` (the hand-set weights, the
        default) or ``learned`` (:mod:`hqa.answering.ranker`, an ablation; by hand when no learned arm fits the
        reranker that ran)."""
        super().__init__()
        self.ranker = ranker
        from hqa.signatures.basic import ClosedBookAnswer
        from hqa.signatures.grounded import GroundedAnswer
        from hqa.signatures.humaniq import MergeAnswers

        self.choices = choices
        self.answer_mode = answer_mode
        self.parametric = dspy.Predict(ClosedBookAnswer)
        self.choose = dspy.Predict(GroundedAnswer)
        self.merge = dspy.Predict(MergeAnswers)

    def ground(self, question: str, answers: dict[str, str | None], evidence: dict[str, list],
               toolbox) -> tuple[dict[str, str | None], MergeTrace]:
        """Each source of ``answers`` answers with the candidate the LM picks among the ``choices`` best its
        evidence offers (the evidence reranked for the question first, as the ``simple`` program's hop does); a
        source whose tools returned nothing, or nothing with a candidate, answers None — a grounded answer comes
        from evidence, never from what the agent wrote.  Also returns the trace part: each source's candidates."""
        out: dict[str, str | None] = {source: None for source in answers}
        part = MergeTrace(source_candidates={})
        entities = None
        for source in answers:
            items = evidence.get(source) or []
            if not items:
                continue
            if entities is None:
                entities = toolbox.linker.spot(question, k=2)
            pool = list(toolbox.reranker.rerank(question, list(items), len(items)))
            ranked, used, _ = learned.rank_pool(question, pool, entities=entities, toolbox=toolbox,
                                                n=resolved(self, "choices"), mode=self.ranker)
            if self.ranker != "hand":  # the default's trace stays as it was
                part.ranker = used
            part.source_candidates[source] = [c.to_dict() for c in ranked]
            if len(ranked) > 1:
                picked, error = choose(self.choose, [c.text for c in ranked], shown=candidate_lines(ranked),
                                       question=question)
                part.note(error)
                out[source] = picked if picked is not None else ranked[0].text
            else:
                out[source] = ranked[0].text if ranked else None
        return out, part

    def forward(self, question: str, text: str | None, kg: str | None, use_merge: bool = True,
                evidence: dict[str, list] | None = None, toolbox=None, context: str | None = None) -> Merged:
        part = MergeTrace()
        grounded = resolved(self, "answer_mode") == "grounded"
        from_evidence: list[str | None] = []  # grounded: each source's best candidate, choices beside the agent's
        if grounded and evidence is not None and toolbox is not None:
            part.written_answers = {"text": text, "kg": kg}  # what the agent itself wrote, and the merge reads
            grounded_answers, ground_part = self.ground(question, {"text": text, "kg": kg}, evidence, toolbox)
            part.add(ground_part)
            from_evidence = [grounded_answers["text"], grounded_answers["kg"]]
        param, error = safe_predict(self.parametric, question=question)
        part.note(error)
        internal = answer_or_none(param.answer, clean=True) if param is not None else None
        if grounded and internal and len(internal.split()) > MAX_MEMORY_WORDS:
            part.long_parametric_answer = internal  # not the short answer the signature asks for
            internal = None
        merged = Merged(text or kg or internal or "", text, kg, internal, part)  # the fallback answer first
        if not use_merge:
            return merged
        inputs = dict(question=question, wikipedia_answer=text or "None", wikidata_answer=kg or "None",
                      internal_knowledge=internal or "None", context=" ".join(str(context or "").split()) or "None")
        part.merge_context = inputs["context"]
        if grounded:
            seen: set[str] = set()
            candidates = [a for a in (text, kg, *from_evidence, internal)
                          if a and not (fold(a) in seen or seen.add(fold(a)))]
            part.merge_candidates = candidates
            if len(candidates) == 1:
                merged.answer = candidates[0]
            elif candidates:
                picked, error = choose(self.merge, candidates, **inputs)
                part.note(error)
                merged.answer = picked if picked is not None else merged.answer
            if candidates:
                return merged
        out, error = safe_predict(self.merge, **inputs)
        part.note(error)
        if out is not None:
            merged.answer = clean_answer(out.answer)
        return merged


__all__ = ["MAX_MEMORY_WORDS", "Merged", "SourceMerge"]
