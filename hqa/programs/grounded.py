"""Evidence-grounded answering: the LM picks the answer among candidates drawn from the kept evidence.

:func:`evidence_candidates` lists the candidates (:mod:`hqa.programs.candidates` extracts and ranks them, each
with the line of evidence that supports it); :func:`choose` asks the LM for one of them with a ``Literal``-typed
output field, which DSPy's JSON adapter turns into a JSON-schema enum that the embedded llama.cpp engine enforces
as a grammar.  :class:`SourceMerge` is HumanIQ's ending (parametric answer, then a merge of the source answers),
grounded the same way.
"""

from __future__ import annotations

from typing import Any

import dspy

from hqa.programs.candidates import AnswerCandidate, answer_type, fold, rank_candidates, show_value

__all__ = ["evidence_candidates", "resolve_answer_mode", "choose", "SourceMerge", "answer_type", "show_value",
           "candidate_lines"]


def evidence_candidates(question: str, evidence: list[Any], max_candidates: int = 8, *, entities=(),
                        embed=None) -> list[str]:
    """The texts of :func:`hqa.programs.candidates.rank_candidates`, best first."""
    return [c.text for c in rank_candidates(question, evidence, entities=entities, embed=embed,
                                            max_candidates=max_candidates)]


def candidate_lines(candidates: list[AnswerCandidate], max_support: int = 160) -> list[str]:
    """What the LM is shown for each candidate: ``answer — the evidence it was found in`` (support shortened)."""
    out = []
    for c in candidates:
        support = " ".join(c.support.split())
        if len(support) > max_support:
            support = support[: max_support - 1].rsplit(" ", 1)[0] + "…"
        out.append(f"{c.text} — {support}" if support else c.text)
    return out


def resolve_answer_mode(mode: str | None, settings) -> str:
    """``grounded`` or ``free``: an explicit mode wins, else ``programs.answer_mode``; ``auto`` is grounded for the
    embedded LM only."""
    mode = mode or getattr(getattr(settings, "programs", None), "answer_mode", "auto") or "auto"
    if mode == "auto":
        return "grounded" if settings.lm.provider == "local" else "free"
    return mode


def choose(predictor, trace: dict, candidates: list[str], shown: list[str] | None = None,
           **inputs: Any) -> str | None:
    """Ask ``predictor`` for one of ``candidates``: its signature with ``answer`` typed ``Literal[*candidates]``
    (its demos are kept; a ``candidates`` input, as in :class:`GroundedAnswer`, gets ``shown`` — e.g. each candidate
    with its supporting evidence — or the candidates themselves).

    None when the reply cannot be parsed as one of them (the caller keeps its fallback answer).
    """
    from typing import Literal

    import dspy

    from hqa.programs.common import safe_predict

    signature = predictor.signature.with_updated_fields("answer", type_=Literal[tuple(candidates)])  # type: ignore[valid-type]
    step = dspy.Predict(signature)
    step.demos = list(getattr(predictor, "demos", []) or [])
    step.lm = getattr(predictor, "lm", None)
    if "candidates" in signature.input_fields:
        inputs["candidates"] = shown or candidates
    out = safe_predict(step, trace, **inputs)
    if out is None:
        return None
    answer = str(out.answer)
    return answer if answer in candidates else None


#: in grounded mode a memory answer longer than this is not the short answer the signature asks for, and is no
#: merge candidate (a 135M model sometimes writes a paragraph)
MAX_MEMORY_WORDS = 12


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

    In grounded mode (with the tools' ``evidence`` given) each source answers with a choice among the candidates
    its evidence — the passages / KG rows the tools returned — offers (:meth:`ground`: ranked by
    :mod:`hqa.programs.candidates`, the LM picks one of the ``choices`` best with ``choose``, default
    ``programs.choices``) instead of the answer the agent wrote, and a memory answer longer than
    :data:`MAX_MEMORY_WORDS` words is dropped; then the merge picks one of the distinct source answers (a
    ``Literal`` choice; no LM call for a single one).  In free mode the merge writes free text; without
    ``use_merge`` (or when the reply is unparsable) the first source that answered wins, text before KG before
    memory.  Records ``trace["answers"]["parametric"]`` (and ``merge_candidates``, ``source_candidates``)."""

    def __init__(self, choices: int | None = None, answer_mode: str | None = None):
        super().__init__()
        from hqa.signatures.basic import ClosedBookAnswer
        from hqa.signatures.grounded import GroundedAnswer
        from hqa.signatures.hqa_agent import MergeAnswers

        self.choices = choices  # None: programs.choices of the settings
        self.answer_mode = answer_mode  # None: programs.answer_mode of the settings
        self.parametric = dspy.Predict(ClosedBookAnswer)
        self.choose = dspy.Predict(GroundedAnswer)
        self.merge = dspy.Predict(MergeAnswers)

    def ground(self, question: str, answers: dict[str, str | None], evidence: dict[str, list], toolbox,
               trace: dict) -> dict[str, str | None]:
        """Each source of ``answers`` answers with the candidate the LM picks among the ``choices`` best its
        evidence offers (the evidence reranked for the question first, as the ``simple`` program's hop does); a
        source whose tools returned nothing, or nothing with a candidate, answers None — a grounded answer comes
        from evidence, never from what the agent wrote."""
        from hqa.programs.candidates import rank_candidates

        out: dict[str, str | None] = {source: None for source in answers}
        shown = trace.setdefault("source_candidates", {})
        entities = None
        for source in answers:
            items = evidence.get(source) or []
            if not items:
                continue
            if entities is None:
                entities = toolbox.linker.spot(question, k=2)
            pool = list(toolbox.reranker.rerank(question, list(items), len(items)))
            ranked = rank_candidates(question, pool, entities=entities, embed=toolbox.embed_texts,
                                     max_candidates=self.choices or toolbox.settings.programs.choices)
            shown[source] = [c.to_dict() for c in ranked]
            if len(ranked) > 1:
                picked = choose(self.choose, trace, [c.text for c in ranked], shown=candidate_lines(ranked),
                                question=question)
                out[source] = picked if picked is not None else ranked[0].text
            else:
                out[source] = ranked[0].text if ranked else None
        return out

    def forward(self, question: str, text: str | None, kg: str | None, trace: dict, settings,
                use_merge: bool = True, evidence: dict[str, list] | None = None, toolbox=None,
                context: str | None = None) -> str:
        from hqa.programs.common import clean_answer, none_if_empty, safe_predict

        grounded = resolve_answer_mode(self.answer_mode, settings) == "grounded"
        if grounded and evidence is not None and toolbox is not None:
            trace["written_answers"] = {"text": text, "kg": kg}  # what the agent itself wrote
            grounded_answers = self.ground(question, {"text": text, "kg": kg}, evidence, toolbox, trace)
            text, kg = grounded_answers["text"], grounded_answers["kg"]
        trace["answers"]["text"], trace["answers"]["kg"] = text, kg
        param = safe_predict(self.parametric, trace, question=question)
        internal = none_if_empty(param.answer) if param is not None else None
        if grounded and internal and len(internal.split()) > MAX_MEMORY_WORDS:
            trace["long_parametric_answer"] = internal  # not the short answer the signature asks for
            internal = None
        trace["answers"]["parametric"] = internal
        fallback = text or kg or internal or ""
        if not use_merge:
            return fallback
        inputs = dict(question=question, wikipedia_answer=text or "None", wikidata_answer=kg or "None",
                      internal_knowledge=internal or "None", context=" ".join(str(context or "").split()) or "None")
        trace["merge_context"] = inputs["context"]
        if grounded:
            seen: set[str] = set()
            candidates = [a for a in (text, kg, internal) if a and not (fold(a) in seen or seen.add(fold(a)))]
            trace["merge_candidates"] = candidates
            if len(candidates) == 1:
                return candidates[0]
            if candidates:
                picked = choose(self.merge, trace, candidates, **inputs)
                return picked if picked is not None else fallback
        merged = safe_predict(self.merge, trace, **inputs)
        return clean_answer(merged.answer) if merged is not None else fallback
