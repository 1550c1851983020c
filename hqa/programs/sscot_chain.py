"""Semi-structured chains (Su et al. 2023): parsing, the syntactic filter, canonical forms, voting and fill order.

Pure Python, no DSPy.  A chain is a list of ``(head, relation, tail)`` triples separated by ``;`` in which unknown
entities or values are *masks* ``#1``, ``#2``, …::

    (Citibank, inception, #1); (#2, position held, President of the United States); (#2, start time, #1)

Parsing
-------
* A leading ``chain:`` label, wrapping back-ticks/quotes and an outer ``[...]`` are tolerated and removed.
* Triples are the top-level parenthesised groups.  Between and around groups only whitespace and the separators
  ``; , | .`` and arrows (``->``, ``→``) may appear; any other text outside a group, an unbalanced parenthesis or a
  string with no group at all makes the chain **malformed**.
* Inside a group, slots are split at top-level commas; commas and parentheses inside double quotes or nested
  parentheses do not split (``("Washington, D.C.", capital of, #1)``, ``(Paris (film), director, #1)``).  A group
  must have exactly three non-empty slots, else the chain is **malformed**.  Surrounding quotes are stripped.
* A *mask marker* is a ``#`` at the start of a word (not preceded by a letter, digit, ``_`` or ``#``; so ``C#`` and
  ``F# minor`` are plain text).  A slot that is exactly a marker plus a number (``#3``, also ``# 3``) is a
  *numbered mask* (stored as ``#3``); a slot whose marker has no number (``#``, ``#x``, ``#?``) holds a *bare
  mask*.  A slot that embeds a numbered mask in other text (``#1's father``) is **malformed**.

The filter: :func:`validate` returns the error names, in the order of :data:`ERROR_TYPES`
-------------------------------------------------------------------------------------------
``malformed``
    the text does not parse into triples (rules above).  When it fires it is the only error reported.
``missing_mask_number``
    some slot (head, relation or tail) holds a bare mask: a mask marker with no number.
``masked_relation``
    some relation slot holds a mask (numbered or bare): relations must be known.
``unmasked_triple``
    some triple has no mask (numbered or bare) in its head or tail: a fully known triple asks nothing.
``mask_underflow``
    the lowest mask number used is not 1: numbering must start at exactly ``#1`` (``#0`` or a chain that only uses
    ``#2``, ``#3`` …).
``discontinuous_mask``
    the distinct mask numbers skip a value (``#1`` and ``#3`` without ``#2``).
``mask_overflow``
    the highest mask number is greater than the number of triples.  Filling resolves at most one mask per triple,
    so a chain of *T* triples can bind at most *T* unknowns; a higher number means more unknowns than triples (or a
    skipped number, which ``discontinuous_mask`` also reports).

The numbering rules look at every numbered mask in every slot, the relation included.  A chain is *valid* when the
list is empty.  (Whether every mask can actually be reached is a property of :func:`fill_order`, not of the filter.)

Voting
------
:func:`canonical` renders a parsed chain with whitespace collapsed, case folded, quotes dropped and masks renumbered
in order of first appearance (head, relation, tail, triple by triple).  :func:`vote` counts canonical forms;
the winner has the most votes, ties broken by the earliest sample.

Fill order
----------
:func:`fill_order` scans the triples left to right, repeatedly taking the leftmost not-yet-used triple whose head
and tail hold exactly one unfilled mask while the other slot is known text or an already filled mask (and whose
relation is not a mask and which holds no bare mask); that mask is filled from that triple.  It stops when no triple qualifies.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

ERROR_TYPES = (
    "malformed",
    "missing_mask_number",
    "masked_relation",
    "unmasked_triple",
    "mask_underflow",
    "discontinuous_mask",
    "mask_overflow",
)

_MARKER = r"(?<![\w#])#"
_MASK_RE = re.compile(r"^#\s*(\d+)$")
_MARKER_RE = re.compile(_MARKER)
_EMBEDDED_MASK_RE = re.compile(_MARKER + r"\s*\d")
_LABEL_RE = re.compile(r"^\s*(?:semi[- ]structured\s+)?(?:chain|triples)\s*[:=]\s*", re.I)
_OUTSIDE_OK = re.compile(r"^[\s;,|.\-–>→]*$")
_WS = re.compile(r"\s+")
_QUOTES = "\"'`“”‘’"


class ChainSyntaxError(ValueError):
    """The text is not a chain of ``(head, relation, tail)`` triples."""


@dataclass(frozen=True)
class Triple:
    head: str
    relation: str
    tail: str

    @property
    def slots(self) -> tuple[str, str, str]:
        return (self.head, self.relation, self.tail)

    def __str__(self) -> str:
        return "(" + ", ".join(_quote(s) for s in self.slots) + ")"


def _quote(slot: str) -> str:
    """Slots with a comma (or a double quote) are written in double quotes so the text parses back the same."""
    if "," in slot or '"' in slot:
        return '"' + slot.replace('"', "'") + '"'
    return slot


# -- slots ----------------------------------------------------------------------------------------------------
def mask_number(slot: str) -> int | None:
    """``#3`` → 3; None for anything that is not exactly a numbered mask."""
    m = _MASK_RE.match(slot.strip())
    return int(m.group(1)) if m else None


def is_bare_mask(slot: str) -> bool:
    """A mask marker without a number (``#``, ``#x``)."""
    return mask_number(slot) is None and bool(_MARKER_RE.search(slot)) and not _EMBEDDED_MASK_RE.search(slot)


def has_mask(slot: str) -> bool:
    """A numbered or a bare mask."""
    return mask_number(slot) is not None or is_bare_mask(slot)


# -- parsing --------------------------------------------------------------------------------------------------
def _unquote(text: str) -> str:
    text = text.strip()
    while len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES:
        text = text[1:-1].strip()
    return text


def _strip_wrapping(text: str) -> str:
    text = text.strip()
    while True:
        before = text
        text = _unquote(_LABEL_RE.sub("", text).strip("`"))
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1].strip()
        if text == before:
            return text


def _groups(text: str) -> list[str]:
    """Top-level parenthesised groups; raises ChainSyntaxError on stray text or unbalanced parentheses."""
    groups: list[str] = []
    outside: list[str] = []
    depth, start, quoted = 0, -1, False
    for i, ch in enumerate(text):
        if depth > 0 and ch == '"':
            quoted = not quoted
            continue
        if quoted:
            continue
        if ch == "(":
            if depth == 0:
                start = i + 1
            depth += 1
        elif ch == ")":
            if depth == 0:
                raise ChainSyntaxError("unbalanced ')'")
            depth -= 1
            if depth == 0:
                groups.append(text[start:i])
        elif depth == 0:
            outside.append(ch)
    if depth != 0 or quoted:
        raise ChainSyntaxError("unbalanced '(' or quote")
    if not groups:
        raise ChainSyntaxError("no (head, relation, tail) triple")
    if not _OUTSIDE_OK.match("".join(outside)):
        raise ChainSyntaxError("text outside the triples")
    return groups


def _split_slots(group: str) -> list[str]:
    parts, buf, depth, quoted = [], [], 0, False
    for ch in group:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
        elif not quoted and ch == ")":
            depth -= 1
        if ch == "," and depth == 0 and not quoted:
            parts.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
    parts.append("".join(buf))
    return [_unquote(_WS.sub(" ", p)) for p in parts]


def parse_chain(text: str | list[Triple]) -> list[Triple]:
    """The triples of a chain string (a list of triples is returned as is); raises ChainSyntaxError."""
    if isinstance(text, list):
        return text
    if not isinstance(text, str) or not text.strip():
        raise ChainSyntaxError("empty chain")
    triples = []
    for group in _groups(_strip_wrapping(text)):
        slots = _split_slots(group)
        if len(slots) != 3:
            raise ChainSyntaxError(f"triple with {len(slots)} slots: ({group})")
        if any(not s for s in slots):
            raise ChainSyntaxError(f"empty slot in ({group})")
        for i, s in enumerate(slots):
            n = mask_number(s)
            if n is not None:
                slots[i] = f"#{n}"  # "# 1", "#01" → "#1"
            elif _EMBEDDED_MASK_RE.search(s):
                raise ChainSyntaxError(f"mask mixed with text in slot {s!r}")
        triples.append(Triple(*slots))
    return triples


def try_parse(text: str | list[Triple]) -> list[Triple] | None:
    try:
        return parse_chain(text)
    except ChainSyntaxError:
        return None


# -- the filter -----------------------------------------------------------------------------------------------
def validate(chain: str | list[Triple]) -> list[str]:
    """The syntactic errors of a chain (names from :data:`ERROR_TYPES`, in that order); ``[]`` when valid."""
    triples = try_parse(chain)
    if triples is None:
        return ["malformed"]
    errors: set[str] = set()
    numbers: set[int] = set()
    for t in triples:
        for s in t.slots:
            n = mask_number(s)
            if n is not None:
                numbers.add(n)
            elif is_bare_mask(s):
                errors.add("missing_mask_number")
        if has_mask(t.relation):
            errors.add("masked_relation")
        if not (has_mask(t.head) or has_mask(t.tail)):
            errors.add("unmasked_triple")
    if numbers:
        ordered = sorted(numbers)
        if ordered[0] != 1:
            errors.add("mask_underflow")
        if any(b - a > 1 for a, b in zip(ordered, ordered[1:])):
            errors.add("discontinuous_mask")
        if ordered[-1] > len(triples):
            errors.add("mask_overflow")
    return [e for e in ERROR_TYPES if e in errors]


def is_valid(chain: str | list[Triple]) -> bool:
    return not validate(chain)


# -- canonical forms and voting -------------------------------------------------------------------------------
def masks(triples: list[Triple]) -> list[int]:
    """Distinct mask numbers in order of first appearance."""
    seen: list[int] = []
    for t in triples:
        for s in t.slots:
            n = mask_number(s)
            if n is not None and n not in seen:
                seen.append(n)
    return seen


def renumber(triples: list[Triple]) -> list[Triple]:
    """Masks renumbered ``#1, #2, …`` in order of first appearance; other slots whitespace-collapsed."""
    mapping = {n: i + 1 for i, n in enumerate(masks(triples))}

    def slot(s: str) -> str:
        n = mask_number(s)
        return f"#{mapping[n]}" if n is not None else _WS.sub(" ", s).strip()

    return [Triple(slot(t.head), slot(t.relation), slot(t.tail)) for t in triples]


def format_chain(triples: list[Triple]) -> str:
    return "; ".join(str(t) for t in triples)


def canonical(chain: str | list[Triple]) -> str | None:
    """The voting key: renumbered masks, collapsed whitespace, case folded, quotes dropped; None if malformed."""
    triples = try_parse(chain)
    if triples is None:
        return None
    folded = [Triple(*(s.casefold() for s in t.slots)) for t in renumber(triples)]
    return format_chain(folded)


def normalized(chain: str | list[Triple]) -> str | None:
    """Like :func:`canonical` but case preserved (what the program shows and fills)."""
    triples = try_parse(chain)
    return None if triples is None else format_chain(renumber(triples))


@dataclass
class Vote:
    winner: int  # index (into the voted list) of the first chain with the winning canonical form
    canonical: str
    counts: list[tuple[str, int, int]]  # (canonical form, votes, first index), best first


def vote(chains: list[str | list[Triple]]) -> Vote | None:
    """Self-consistency over chains: the most frequent canonical form; ties go to the earliest sample.

    Malformed chains (canonical form None) get no vote.  Returns None when nothing can vote.
    """
    keys = [canonical(c) for c in chains]
    counter = Counter(k for k in keys if k is not None)
    if not counter:
        return None
    first = {}
    for i, k in enumerate(keys):
        if k is not None and k not in first:
            first[k] = i
    counts = sorted(((k, n, first[k]) for k, n in counter.items()), key=lambda x: (-x[1], x[2]))
    best = counts[0]
    return Vote(winner=best[2], canonical=best[0], counts=counts)


# -- fill order -----------------------------------------------------------------------------------------------
def fill_order(triples: str | list[Triple]) -> list[tuple[int, int]]:
    """``[(triple index, mask number), …]``: which triple fills which mask, in order (see module docstring)."""
    triples = parse_chain(triples)
    filled: set[int] = set()
    used: set[int] = set()
    order: list[tuple[int, int]] = []
    while True:
        step = None
        for i, t in enumerate(triples):
            if i in used or has_mask(t.relation):
                continue
            h, tl = mask_number(t.head), mask_number(t.tail)
            if is_bare_mask(t.head) or is_bare_mask(t.tail):
                continue
            open_ = [n for n in (h, tl) if n is not None and n not in filled]
            if len(open_) == 1:
                step = (i, open_[0])
                break
        if step is None:
            return order
        used.add(step[0])
        filled.add(step[1])
        order.append(step)


def unfilled(triples: list[Triple], order: list[tuple[int, int]]) -> list[int]:
    done = {m for _, m in order}
    return [m for m in masks(triples) if m not in done]


__all__ = [
    "ERROR_TYPES", "ChainSyntaxError", "Triple", "Vote", "canonical", "fill_order", "format_chain", "has_mask",
    "is_bare_mask", "is_valid", "mask_number", "masks", "normalized", "parse_chain", "renumber", "try_parse",
    "unfilled", "validate", "vote",
]
