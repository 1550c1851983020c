"""Answers as programs write and read them: the one clean-up of an LM's answer (:func:`clean_answer`, with the
sentence bound for small models, :func:`bound_text`) and the one "no answer" test for a source's or a row's answer
(:func:`answer_or_none`, on :func:`hqa.scoring.metrics.is_empty_answer`, the definition scoring uses too)."""

from __future__ import annotations

import re
from typing import Any

from hqa.scoring.metrics import is_empty_answer

_PREFIX = re.compile(r"^\s*(?:(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*[:\-]?\s+|(?:the\s+)?(?:final\s+)?answer\s*[:\-]\s*)", re.I)


def clean_answer(text: Any, bounded: bool | None = None) -> str:
    """Strip an ``Answer:`` prefix, quotes and trailing punctuation from an LM answer; with ``bounded`` (default:
    when the embedded small LM answers, :func:`small_lm_answers`) cut it to one sentence first (:func:`bound_text`)."""
    if text is None:
        return ""
    text = " | ".join(map(str, text)) if isinstance(text, (list, tuple)) else str(text)
    if small_lm_answers() if bounded is None else bounded:
        text = bound_text(text)
    for _ in range(5):  # small models repeat the prefix ("The answer is: The answer is: ...")
        stripped = _PREFIX.sub("", text, count=1).strip()
        if stripped == text.strip():
            break
        text = stripped
    return text.strip().strip('"').strip("'").strip().rstrip(".").strip()


# hqa's own bounds (no paper states one): an answer is a name, a date or a number, so a free-text answer of a small
# model is cut at its first sentence, at a phrase it starts repeating, and at MAX_ANSWER_WORDS words
MAX_ANSWER_WORDS = 40
# a sentence ends at . ! ? followed by a space; a "." does not after an initial ("J. R. R."), "U.S." or these
_NOT_AN_END = frozenset("mr ms mrs dr st mt jr sr vs no co inc ltd gen col lt prof rev fr jan feb mar apr jun jul aug "
                        "sep sept oct nov dec".split())
_END_MARK = re.compile(r"[.!?](?=\s)")


def _first_sentence(text: str) -> str:
    for m in _END_MARK.finditer(text):
        word = text[: m.start()].split()[-1] if text[: m.start()].split() else ""
        bare = word.rstrip(".").lstrip("(\"'")
        if m.group() == "." and (len(bare) <= 1 or "." in bare or bare.lower() in _NOT_AN_END):
            continue
        return text[: m.start()]
    return text


def small_lm_answers() -> bool:
    """Whether the LM answering in this context is the embedded small model (``lm.provider = local``, a ``local/``
    model), whose free text runs on: remote LMs keep their answers as written."""
    import dspy

    return str(getattr(dspy.settings.lm, "model", "") or "").startswith("local/")


def bound_text(text: str) -> str:
    """``text`` cut to its first line and first sentence, stopped where a phrase starts repeating itself (a phrase of
    4+ words said twice in a row, or a shorter one three times), and cut at :data:`MAX_ANSWER_WORDS` words."""
    text = next((line for line in str(text).splitlines() if line.strip()), "").strip()
    words = _first_sentence(text).split()[: 4 * MAX_ANSWER_WORDS]  # the loop search below is quadratic
    keys = [w.lower().strip(",;:") for w in words]
    for i in range(1, len(words)):
        for n in range(1, min(i, len(words) - i) + 1):
            times = 2 if n >= 4 else 3  # the phrase words[i-n:i] and (times - 1) copies right after it
            if i + n * (times - 1) <= len(words) and all(keys[i + k * n: i + (k + 1) * n] == keys[i - n: i]
                                                         for k in range(times - 1)):
                return " ".join(words[:i]).rstrip(",;:")
    return " ".join(words[:MAX_ANSWER_WORDS]).rstrip(",;:")


def answer_or_none(value: Any, clean: bool = False) -> str | None:
    """``value`` as answer text (a list joined with `` | ``, surrounding space and a trailing comma removed), or None
    when it gives no answer (:func:`hqa.scoring.metrics.is_empty_answer`: empty, "None", "unknown", "[]", …).
    ``clean``: an LM's answer, cleaned first (:func:`clean_answer`, then brackets and quotes around it removed)."""
    if value is None:
        return None
    text = " | ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    if clean:
        text = clean_answer(text).strip("[]").strip().strip('"').strip("'").strip()
    return None if is_empty_answer(text) else text.strip().rstrip(",").strip()


__all__ = ["MAX_ANSWER_WORDS", "answer_or_none", "bound_text", "clean_answer", "small_lm_answers"]
