"""Parse ReAct-style solution processes (Thought / Action / Action Input / Observation).

Two recorded formats are read:

* HumanIQ human solution processes (``One_Shot`` field of ``humaniq/data/*.json``): the text is a Python
  ``str.format`` template, so literal braces appear doubled (``{{``); they are undoubled here.
* GPT-4 late-fusion logs (``intermediate_logs`` of ``humaniq/late_fusion/*.json``): same keywords, single braces,
  ``Observation:`` often without a space.

Both end in ``Final Answer: Wikipedia_Answer: …, Wikidata_Answer: […]`` optionally followed by
``Assistant Response: …`` and (logs) ``Internal Knowledge: …``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hqa.scoring.answers import answer_or_none

_KEY_RE = re.compile(r"^(Thought|Action Input|Action|Observation|Final Answer|Assistant Response)\s*:", re.M)
_QUESTION_RE = re.compile(r"^\s*(?:Question\s*:)?\s*(.*?)\s*$", re.S)


@dataclass
class Step:
    """One Thought → Action → Observation round."""

    thought: str = ""
    action: str = ""
    action_input: str = ""
    observation: str = ""


@dataclass
class Trace:
    """A parsed solution process."""

    question: str
    steps: list[Step] = field(default_factory=list)
    wikipedia_answer: str | None = None
    wikidata_answer: str | None = None
    internal_knowledge: str | None = None
    response: str | None = None

    @property
    def actions(self) -> list[str]:
        return [s.action for s in self.steps if s.action]


def parse_final_answer(text: str) -> dict[str, str | None]:
    """Split ``Wikipedia_Answer: a, Wikidata_Answer: [b], Internal Knowledge: c`` into its parts."""
    out: dict[str, str | None] = {"wikipedia": None, "wikidata": None, "internal": None}
    marks = [
        ("wikipedia", re.search(r"Wikipedia_Answer\s*:", text)),
        ("wikidata", re.search(r"Wikidata_Answer\s*:", text)),
        ("internal", re.search(r"Internal Knowledge\s*:", text)),
    ]
    found = sorted(((m.start(), m.end(), k) for k, m in marks if m), key=lambda t: t[0])
    for i, (_, end, key) in enumerate(found):
        stop = found[i + 1][0] if i + 1 < len(found) else len(text)
        out[key] = answer_or_none(text[end:stop])
    if not found:
        out["wikipedia"] = answer_or_none(text)
    return out


def parse_trace(text: str, *, templated: bool = False, question: str | None = None) -> Trace:
    """Parse one ReAct trace.

    ``templated`` undoubles ``{{ }}`` (HumanIQ ``One_Shot`` fields).  ``question`` overrides the question read
    from the text's first block.
    """
    if templated:  # a str.format template's {{ }} back to literal braces
        text = text.replace("{{", "{").replace("}}", "}")
    matches = list(_KEY_RE.finditer(text))
    head = text[: matches[0].start()] if matches else text
    q = question if question is not None else _QUESTION_RE.match(head).group(1).strip()
    trace = Trace(question=q)
    step: Step | None = None
    final_text = ""
    for i, m in enumerate(matches):
        key = m.group(1)
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        value = text[m.end():end].strip()
        if key == "Thought":
            step = Step(thought=value)
            trace.steps.append(step)
        elif key in ("Action", "Action Input", "Observation"):
            if step is None or (key == "Action" and step.action):
                step = Step()
                trace.steps.append(step)
            if key == "Action":  # the tool name as recorded: WikiSearchSummary (a WikiSearch variant, 12 human steps)
                step.action = value.split()[0] if value else ""  # stays itself, so action-sequence distances see it
            elif key == "Action Input":
                step.action_input = value
            else:
                step.observation = value
        elif key == "Final Answer":
            final_text = value
        elif key == "Assistant Response":
            # A late-fusion log appends ", Internal Knowledge: …" to the response.
            resp, _, internal = value.partition("Internal Knowledge:")
            trace.response = answer_or_none(resp)
            if internal:
                trace.internal_knowledge = answer_or_none(internal)
    if final_text:
        parts = parse_final_answer(final_text)
        trace.wikipedia_answer = parts["wikipedia"]
        trace.wikidata_answer = parts["wikidata"]
        trace.internal_knowledge = trace.internal_knowledge or parts["internal"]
    # Steps that only carry a closing thought ("I now know the final answer") have no action; keep them only if
    # they have text, so thought-only reasoning survives while empty splits do not.
    trace.steps = [s for s in trace.steps if s.action or s.thought]
    return trace


__all__ = ["Step", "Trace", "parse_trace", "parse_final_answer"]
