"""HumanIQ's prompt fixtures shared by the prompt tests: a CompMix question with a human process of its own, a
scripted agent run for it, and helpers that read the rendered prompts of a scripted LM's history."""

from __future__ import annotations
from lmkit import step


from hqa.data.human import format_trajectory
from hqa.programs.humaniq import human_react_demo
from hqa.retrievers.base import Evidence


Q = "Who directed raiders of the lost ark?"  # a CompMix question with a human process of its own


RESPONSE = "The Raiders of the Lost Ark page names Steven Spielberg as its director; Wikidata agrees."


def raiders_page(query, k=5):
    return [Evidence(text="Raiders of the Lost Ark is a 1981 film directed by Steven Spielberg.", source="text",
                     score=0.9, meta={"id": "p-raiders", "title": "Raiders of the Lost Ark"})][:k]


def rendered(lm, call: int) -> str:
    return "\n".join(str(m["content"]) for m in lm.history[call]["messages"])


def signature_of(lm, call: int) -> str:
    system = lm.history[call]["messages"][0]["content"]
    return system.split("Your output fields are:")[1]


def calls_with_output(lm, field: str) -> list[int]:
    return [i for i in range(len(lm.history)) if f"`{field}`" in signature_of(lm, i)]


def assert_complete(text: str, demo) -> None:
    """The whole process is in ``text``: question, every Thought / Action / Action Input / Observation, the final
    per-source answers and the assistant response."""
    assert demo.question in text, demo.id
    last = max(i for i, s in enumerate(demo.steps) if s.action)
    assert format_trajectory(demo.steps[:last + 1]) in text, demo.id
    assert all(s.thought.strip() in text for s in demo.steps if s.thought), demo.id  # closing thoughts too
    assert demo.response and " ".join(demo.response.split()) in text, demo.id
    assert human_react_demo(demo).next_tool_args in text, demo.id


AGENT_RUN = [
    step("Search Wikipedia", "WikiSearch", "Raiders of the Lost Ark"),
    {"title": "Raiders of the Lost Ark", "summary": "A 1981 film directed by Steven Spielberg."},  # WikiSearch's LM
    step("Find its QID", "GetWikidataID", "Raiders of the Lost Ark"),
    step("Done", "Finish", f"Wikipedia_Answer: Steven Spielberg, Wikidata_Answer: [Steven Spielberg]\n\n"
                           f"Assistant Response: {RESPONSE}"),
    {"answer": "George Lucas"},  # parametric
    {"answer": "Steven Spielberg"},  # final response generation
]
