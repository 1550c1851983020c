"""Tokens of the SQUALL Wikidata dialect (HumanIQ §3, generateQuery; the language is Ferré's SQUALL).

Terms are ``<Q11424:film>`` / ``<P179:part_of_the_series>``, a label alone (``<U.S._state>``) or with a stray space
(``<Q7725634 >``); ``-s`` glued to a term marks a plural and ``is-`` glued to a property makes it a verb
(docs/squall.md, "The dialect").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN_RE = re.compile(r"""
    (?P<ref><[^<>]*>)(?:-s\b)?          # <Q5:human>, <P31:instance_of>, <label>; optional plural -s
  | (?P<isv>(?:is|are|was|were)-)(?=<)  # is-<P179:...>
  | (?P<ord>\d+(?:st|nd|rd|th))\b       # 2nd, 7th
  | (?P<num>-?\d+(?:\.\d+)?)(?![\w.])   # 2000, 1400000000
  | (?P<str>"[^"]*")                    # "ace ventura"
  | (?P<word>[A-Za-z][A-Za-z']*)        # which, has, ...
  | (?P<punct>[()?,])
  | (?P<space>\s+)
""", re.X)

_ID_RE = re.compile(r"^\s*([QP])\s*(\d+)\s*(?:\(s\))?\s*(?::\s*(.*?))?\s*$")


class SquallSyntaxError(ValueError):
    """The text is not a SQUALL query of the supported dialect; ``pos`` is the character offset of the problem."""

    def __init__(self, message: str, pos: int = 0):
        super().__init__(message)
        self.pos = pos


@dataclass(frozen=True)
class Ref:
    """A bracketed Wikidata term: ``id`` (``Q5`` / ``P31``) and ``label``; ``id`` is None for a label-only term."""

    id: str | None
    label: str

    @property
    def kind(self) -> str:
        return self.id[0] if self.id else "?"


@dataclass(frozen=True)
class Token:
    kind: str  # ref | isv | ord | num | str | word | punct
    text: str  # lower-cased for words
    pos: int
    ref: Ref | None = None


def parse_ref(inner: str) -> Ref:
    """``Q11424:film`` → Ref('Q11424', 'film'); ``U.S._state`` → Ref(None, 'U.S._state')."""
    m = _ID_RE.match(inner)
    if m:
        return Ref(m.group(1) + m.group(2), (m.group(3) or "").strip())
    return Ref(None, inner.strip())


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``; raises SquallSyntaxError on a character no token starts with."""
    out: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m:
            raise SquallSyntaxError(f"unexpected character {text[pos]!r} at {pos}", pos)
        kind = m.lastgroup or ""
        if kind == "ref":
            inner = m.group("ref")[1:-1]
            if not inner.strip():
                raise SquallSyntaxError(f"empty term <> at {pos}", pos)
            out.append(Token("ref", inner, pos, parse_ref(inner)))
        elif kind == "isv":
            out.append(Token("isv", m.group(kind)[:-1].lower(), pos))
        elif kind == "word":
            out.append(Token("word", m.group(kind).lower(), pos))
        elif kind != "space":
            out.append(Token(kind, m.group(kind), pos))
        pos = m.end()
    return out
