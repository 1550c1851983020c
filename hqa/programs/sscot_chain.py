"""Semi-structured reasoning chains (SS-CoT, Su et al. 2023): the chain language, the syntactic filter of
Appendix B, canonical forms for the self-consistency vote, and the fill state of §3.2.  Pure Python, no DSPy.

The language (SS-CoT §3.1, Table 4)
-----------------------------------
A chain is triples separated by ``;`` and closed by a final-answer clause::

    LaLa DX >> language >> #1; spirits associated with Shintoism in #1 >> name >> #2; final answer: #2

* a triple is ``head >> relation >> tail``; each part is an entity mention, a relation or free text;
* a *mask* is ``#`` followed by a number (``#1``, ``#2``, …) and may stand alone or sit inside free text
  (``flag made first between Cuba and #1``); a ``#`` directly after a letter, digit or ``#`` is plain text
  (``C#``, ``F# minor``);
* the chain ends with ``final answer: #answer`` (Appendix B) or ``final answer: #<number>`` (§3.1).

:func:`parse_chain` reads that text (a leading ``Reasoning Chain:`` label and wrapping quotes/back-ticks are
dropped; ``;`` inside double quotes does not split) and ``str(chain)`` prints it back exactly as the paper writes it
(`` >> `` between parts, ``; `` between clauses): every Table 4 chain round-trips character for character.
:func:`parse_chain` raises :class:`ChainSyntaxError` only when the text has no triple structure at all (a clause
that is not three ``>>``-separated parts, or no final-answer clause); it also reads *filled* chains (Table 4's
"Filled reasoning chain", whose final answer is a value).

The filter (SS-CoT Appendix B)
------------------------------
:func:`validate` returns the names of :data:`ERROR_TYPES` a sampled chain has (``[]`` = kept):

``MaskUnderflowError`` / ``MaskOverflowError``
    the number of *unique* numbered masks is below ``min_masks`` / above ``max_masks``.  Defaults 2 and 4: the
    values Appendix B gives for multi-hop QA ("at least two unique masks", "rarely more than four hops").
``DiscontinuousMaskError``
    the unique mask numbers are not ``1, 2, …, n`` (a jump such as ``#1`` → ``#3``; also numbering that does not
    start at ``#1``, since §3.1 numbers masks ascending from ``#1`` — hqa's reading).
``MissingMaskNumberError``
    a ``#`` with no number after it, apart from the final answer's ``#answer``.
``MissingTripleMaskError``
    a triple in which neither head nor tail holds a mask.
``IncorrectTripleRelationMaskError``
    a triple whose relation holds a mask.
``IncorrectTripleFormatError``
    a clause that is not ``head >> relation >> tail`` (e.g. a relation split by an extra ``>>``); a chain without
    any triple also has it.
``FinalAnswerFormatError``
    the chain does not end with ``final answer: #answer`` (or ``#<number>`` of a mask its triples use), or a
    final-answer clause stands before the end.  A last clause that is neither a triple nor a final-answer clause
    (``answer: #2``) counts as this error only.

The mask counts look at every clause except the final answer.  A malformed clause is not checked for the
triple-level errors (it has no head/relation/tail).

Filling (SS-CoT §3.2) and voting
--------------------------------
Fill state is ``{mask number: value}``; :func:`valid_triples` lists the paper's *valid triplets* and
:func:`substitute` writes the values in.  :func:`vote` counts the :func:`canonical` forms of the chains.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from hqa.signatures.sscot import CHAIN_PATTERN  # the chain language as one regular expression, for grammars

ERROR_TYPES = ("MaskUnderflowError", "MaskOverflowError", "DiscontinuousMaskError", "MissingMaskNumberError",
               "MissingTripleMaskError", "IncorrectTripleRelationMaskError", "IncorrectTripleFormatError",
               "FinalAnswerFormatError")

#: Appendix B's example setting for multi-hop QA: at least two unique masks, at most four
MIN_MASKS = 2
MAX_MASKS = 4
ANSWER_MASK = "#answer"
ARROW = ">>"

_MASK_RE = re.compile(r"(?<![\w#])#(\d+)")
_BARE_RE = re.compile(r"(?<![\w#])#(?!\d)")
_FINAL_RE = re.compile(r"^final\s+answer\s*:\s*(.*)$", re.I | re.S)
_LABEL_RE = re.compile(r"^\s*(?:semi[- ]structured\s+)?(?:reasoning\s+)?chain\s*:\s*", re.I)
_WS = re.compile(r"\s+")
_QUOTES = "\"'`“”‘’"


class ChainSyntaxError(ValueError):
    """The text is not a chain of ``head >> relation >> tail`` triples closed by ``final answer: …``."""


@dataclass(frozen=True)
class Triple:
    head: str
    relation: str
    tail: str

    @property
    def slots(self) -> tuple[str, str, str]:
        return (self.head, self.relation, self.tail)

    def __str__(self) -> str:
        return f" {ARROW} ".join(self.slots)


@dataclass(frozen=True)
class Chain:
    triples: tuple[Triple, ...]
    final: str  # what follows "final answer:" — #answer, #n, or (in a filled chain) the answer itself

    def __str__(self) -> str:
        return "; ".join([*(str(t) for t in self.triples), f"final answer: {self.final}"])


# -- masks ------------------------------------------------------------------------------------------------------
def mask_numbers(text: str) -> list[int]:
    """The numbers of the masks in ``text``, in order (``"flag of #1 and #2"`` → ``[1, 2]``)."""
    return [int(m) for m in _MASK_RE.findall(text)]


def mask_number(slot: str) -> int | None:
    """``#3`` → 3; None unless the slot is exactly one numbered mask."""
    m = _MASK_RE.fullmatch(slot.strip())
    return int(m.group(1)) if m else None


def has_bare_mask(text: str) -> bool:
    """A ``#`` with no number after it (``#``, ``#x``, ``# 3``)."""
    return bool(_BARE_RE.search(text))


def has_mask(text: str) -> bool:
    return bool(mask_numbers(text)) or has_bare_mask(text)


# -- clauses ----------------------------------------------------------------------------------------------------
def _strip_wrapping(text: str) -> str:
    text = text.strip()
    while True:
        before = text
        text = _LABEL_RE.sub("", text).strip()
        if len(text) >= 2 and text[0] in _QUOTES and text[-1] == text[0]:
            text = text[1:-1].strip()
        if text == before:
            return text


def clauses(text: str) -> list[str]:
    """The ``;``-separated clauses (``;`` inside double quotes does not split), stripped, empty ones dropped."""
    out, buf, quoted = [], [], False
    for ch in _strip_wrapping(text):
        if ch == '"':
            quoted = not quoted
        if ch == ";" and not quoted:
            out.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
    out.append("".join(buf))
    return [c.strip() for c in out if c.strip()]


def _triple(clause: str) -> Triple | None:
    parts = [p.strip() for p in clause.split(ARROW)]
    return Triple(*parts) if len(parts) == 3 and all(parts) else None


def _final(clause: str) -> str | None:
    m = _FINAL_RE.match(clause)
    return m.group(1).strip() if m else None


# -- parsing ----------------------------------------------------------------------------------------------------
def parse_chain(text: str | Chain) -> Chain:
    """The chain in ``text`` (a :class:`Chain` is returned as is); raises :class:`ChainSyntaxError`."""
    if isinstance(text, Chain):
        return text
    if not isinstance(text, str) or not text.strip():
        raise ChainSyntaxError("empty chain")
    parts = clauses(text)
    final = _final(parts[-1])
    if final is None:
        raise ChainSyntaxError("the chain does not end with 'final answer: ...'")
    triples = []
    for clause in parts[:-1]:
        t = _triple(clause)
        if t is None:
            raise ChainSyntaxError(f"not 'head >> relation >> tail': {clause!r}")
        triples.append(t)
    if not triples:
        raise ChainSyntaxError("no triple before the final answer")
    return Chain(tuple(triples), final)


def try_parse(text: str | Chain) -> Chain | None:
    try:
        return parse_chain(text)
    except ChainSyntaxError:
        return None


# -- the filter -------------------------------------------------------------------------------------------------
def validate(text: str | Chain, min_masks: int = MIN_MASKS, max_masks: int = MAX_MASKS) -> list[str]:
    """The Appendix-B errors of a chain (names from :data:`ERROR_TYPES`, in that order); ``[]`` when it is kept."""
    parts = clauses(str(text)) if isinstance(text, (str, Chain)) else []
    errors: set[str] = set()
    final = _final(parts[-1]) if parts else None
    body = parts[:-1] if final is not None else parts
    if final is None and body and _triple(body[-1]) is None and len(body) > 1:
        body = body[:-1]  # a last clause that is neither triple nor final answer: a badly written final answer
    if any(_final(c) is not None for c in body):
        errors.add("FinalAnswerFormatError")
    body = [c for c in body if _final(c) is None]
    numbers: set[int] = set()
    n_triples = 0
    for clause in body:
        numbers.update(mask_numbers(clause))
        t = _triple(clause)
        if t is None:
            errors.add("IncorrectTripleFormatError")
            continue
        n_triples += 1
        if has_bare_mask(clause):
            errors.add("MissingMaskNumberError")
        if has_mask(t.relation):
            errors.add("IncorrectTripleRelationMaskError")
        if not (has_mask(t.head) or has_mask(t.tail)):
            errors.add("MissingTripleMaskError")
    if not n_triples:
        errors.add("IncorrectTripleFormatError")
    if final is None or not (final == ANSWER_MASK or (mask_number(final) in numbers)):
        errors.add("FinalAnswerFormatError")
    if len(numbers) < min_masks:
        errors.add("MaskUnderflowError")
    if len(numbers) > max_masks:
        errors.add("MaskOverflowError")
    if numbers and sorted(numbers) != list(range(1, len(numbers) + 1)):
        errors.add("DiscontinuousMaskError")
    return [e for e in ERROR_TYPES if e in errors]


# -- canonical forms and voting ---------------------------------------------------------------------------------
def masks(chain: Chain) -> list[int]:
    """Distinct mask numbers in order of first appearance (head, relation, tail, triple by triple)."""
    return list(dict.fromkeys(n for t in chain.triples for n in mask_numbers(str(t))))


def _map_masks(text: str, fn) -> str:
    return _MASK_RE.sub(lambda m: fn(int(m.group(1)), m.group(0)), text)


def renumber(chain: Chain) -> Chain:
    """Masks renumbered ``#1, #2, …`` in order of first appearance; whitespace collapsed."""
    mapping = {n: i + 1 for i, n in enumerate(masks(chain))}

    def slot(s: str) -> str:
        return _WS.sub(" ", _map_masks(s, lambda n, raw: f"#{mapping.get(n, n)}")).strip()

    return Chain(tuple(Triple(*(slot(s) for s in t.slots)) for t in chain.triples), slot(chain.final))


def canonical(text: str | Chain) -> str | None:
    """The voting key: renumbered masks, collapsed whitespace, case folded; None when the text does not parse."""
    chain = try_parse(text)
    return None if chain is None else str(renumber(chain)).casefold()


@dataclass
class Vote:
    winner: int  # index (into the voted list) of the first chain with the winning canonical form
    counts: list[tuple[str, int, int]]  # (canonical form, votes, first index), best first


def vote(chains: list[str | Chain]) -> Vote | None:
    """Self-consistency over chains (SS-CoT §3.1, after Wang et al. 2023): the most frequent canonical form, ties to
    the earliest sample.  Chains that do not parse get no vote; None when nothing can vote."""
    keys = [canonical(c) for c in chains]
    counter = Counter(k for k in keys if k is not None)
    if not counter:
        return None
    counts = sorted(((k, n, keys.index(k)) for k, n in counter.items()), key=lambda x: (-x[1], x[2]))
    return Vote(winner=counts[0][2], counts=counts)


# -- fill state (§3.2) ------------------------------------------------------------------------------------------
def fill_text(text: str, filled: dict[int, str]) -> str:
    """``text`` with every filled mask replaced by its value (masks inside free text included)."""
    return _map_masks(text, lambda n, raw: filled.get(n) or raw)


def substitute(chain: Chain, filled: dict[int, str]) -> Chain:
    """The chain with the filled masks written in (heads, tails and the final answer)."""
    return Chain(tuple(Triple(*(fill_text(s, filled) for s in t.slots)) for t in chain.triples),
                 fill_text(chain.final, filled))


def valid_triples(chain: Chain, filled: dict[int, str]) -> list[int]:
    """Indexes of the triples fillable now (SS-CoT §3.2's valid triplets): the relation holds no mask, the head no
    unfilled mask, and the tail is exactly one unfilled mask."""
    out = []
    for i, t in enumerate(chain.triples):
        tail = mask_number(t.tail)
        if tail is None or tail in filled or has_mask(t.relation) or has_bare_mask(t.head):
            continue
        if all(n in filled for n in mask_numbers(t.head)):
            out.append(i)
    return out


def open_masks(chain: Chain, filled: dict[int, str]) -> list[int]:
    return [n for n in masks(chain) if n not in filled]


__all__ = [
    "ANSWER_MASK", "CHAIN_PATTERN", "ERROR_TYPES", "MAX_MASKS", "MIN_MASKS", "Chain", "ChainSyntaxError", "Triple",
    "Vote", "canonical", "clauses", "fill_text", "has_bare_mask", "has_mask", "mask_number", "mask_numbers", "masks",
    "open_masks", "parse_chain", "renumber", "substitute", "try_parse", "valid_triples", "validate", "vote",
]
