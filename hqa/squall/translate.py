"""SQUALL → SPARQL for Wikidata, in the shapes HumanIQ's GenerateSparql observations show (HumanIQ §3).

HumanIQ's generateQuery ran Ferré's squall2sparql in its Wikidata mode and rewrote its ``<Q…:label>`` terms to
``wd:Q…``; the recorded observations therefore look like::

    SELECT DISTINCT ?x1 WHERE { wd:Q126826 p:P571 ?x2 . ?x2 ps:P571 ?x1 . }
    SELECT DISTINCT ?x1 ?x3 WHERE { ?x1 wdt:P31 wd:Q7889 . ?x1 p:P179 ?x2 . ?x2 ps:P179 wd:Q132730 .
        ?x1 p:P2664 ?x4 . ?x4 ps:P2664 ?x3 . } ORDER BY DESC(?x3) LIMIT 1
    SELECT DISTINCT  (COUNT(DISTINCT ?x2) AS ?x1) WHERE { ?x2 wdt:P31 wd:Q5 . wd:Q941293 p:P527 ?x3 . … }
    ASK { wd:Q40166 p:P577 ?x2 . ?x2 ps:P577 ?x1 . BIND (year(?x1) AS ?x3) . FILTER (?x3 < 2010) . }

This module writes the same shapes from its own parser (:mod:`hqa.squall.parser`); it is not a port of
squall2sparql.  A query outside the dialect raises :class:`SquallSyntaxError`; the GenerateSparql tool then answers
with HumanIQ's recorded message :data:`SYNTAX_ERROR_OBSERVATION`.  Docs: ``docs/squall.md``.
"""

from __future__ import annotations

import re

from hqa.squall import ast as A
from hqa.squall.lexer import SquallSyntaxError
from hqa.squall.parser import parse

#: the observation HumanIQ's GenerateSparql returned when squall2sparql could not translate the LM's query
#: (recorded verbatim in the human solution processes and the late-fusion logs)
SYNTAX_ERROR_OBSERVATION = "The possible reason is\n 1) The query is syntactically wrong\n"


def translate(squall: str) -> str:
    """One SQUALL query → one SPARQL query (SELECT DISTINCT / COUNT / ASK).  Raises SquallSyntaxError, also when
    the words parse but make no valid SPARQL (e.g. a name where a variable must be): every translation passes the
    read-only guard RunSparql applies (:func:`hqa.retrievers.sparql.guard.prepare_query`)."""
    from hqa.errors import QueryRejected
    from hqa.retrievers.sparql.guard import prepare_query

    sparql = _translate(squall)
    try:
        prepare_query(sparql)
    except QueryRejected as exc:
        raise SquallSyntaxError(f"the translation is not a valid read-only query ({exc})") from None
    return sparql


def _translate(squall: str) -> str:
    text = _clean(squall)
    q = parse(text)
    ctx = A.Ctx()
    if q.form == "ASK":
        assert q.subject is not None and q.vp is not None
        vp = q.vp
        q.subject.emit(ctx, lambda t: vp.emit(ctx, t))
        return f"ASK {{ {ctx.pop()} }}"
    assert q.answer is not None
    answer = ctx.var()  # ?x1: the answer (or the count)
    target: list[str] = []

    def body(term: str) -> None:
        target.append(term)
        if q.vp is not None:
            q.vp.emit(ctx, term)

    if q.extra and q.form == "SELECT":  # At which <P…> …: the qualifier's value is the answer
        for qual in q.extra:
            qual.answer = answer
        assert q.vp is not None
        q.vp.emit(ctx, answer)
        target.append(answer)
    elif q.extra:  # At how many <P…>: count the qualifier's values
        counted = ctx.var()
        for qual in q.extra:
            qual.answer = counted
        assert q.vp is not None
        q.vp.emit(ctx, counted)
        target.append(counted)
    else:
        if q.form == "SELECT" and isinstance(q.answer, (A.Head, A.Relational, A.Year)):
            q.answer.fixed = answer  # the question's noun phrase gets the answer variable ?x1
        q.answer.emit(ctx, body)
    where = ctx.pop()
    if q.form == "COUNT":
        head = f"SELECT DISTINCT  (COUNT(DISTINCT {target[0]}) AS {answer})"
    else:
        shown = [target[0] if target else answer]
        shown += [v for v in dict.fromkeys(ctx.select_extra) if v not in shown]
        head = "SELECT DISTINCT " + " ".join(shown)
    tail = ""
    if ctx.order:
        direction, var, offset = ctx.order
        tail = f" ORDER BY {direction}({var})" + (f" OFFSET {offset}" if offset else "") + " LIMIT 1"
    return f"{head} WHERE {{ {where} }}{tail}"


def strip_code_fence(text: str) -> str:
    """``text`` without the Markdown code fence an LM may wrap a query in (```sparql … ```)."""
    return re.sub(r"^```\w*|```$", "", str(text or "").strip()).strip()


def _clean(text: str) -> str:
    """The query text the LM wrote, without a ``SQUALL Query:`` label, code fences or surrounding quotes."""
    text = strip_code_fence(text)
    text = re.sub(r"^(?:squall(?:\s+query)?\s*:)\s*", "", text, flags=re.I).strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1].strip()
    return text.splitlines()[0].strip() if text else text


def observation(squall: str) -> str:
    """GenerateSparql's observation for the LM's SQUALL: the SPARQL, or HumanIQ's syntax-error message."""
    try:
        return translate(squall)
    except SquallSyntaxError:
        return SYNTAX_ERROR_OBSERVATION


_VAR_RE = re.compile(r"\?\w+")


def canonical(sparql: str) -> str:
    """A query with whitespace collapsed, doubled braces (HumanIQ's format templates) undoubled and variables
    renamed in order of first appearance: two translations are "the same" when their canonical forms are."""
    text = sparql.replace("{{", "{").replace("}}", "}")
    names: dict[str, str] = {}
    text = _VAR_RE.sub(lambda m: names.setdefault(m.group(0), f"?v{len(names) + 1}"), text)
    return " ".join(text.split())
