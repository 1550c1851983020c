"""Meaning of SQUALL phrases as SPARQL graph patterns over Wikidata's statement model (HumanIQ §3, generateQuery).

Noun phrases (:class:`NP`) are generalised quantifiers: ``np.emit(ctx, k)`` writes the patterns that introduce the
phrase's referent and calls ``k(term)`` with it.  Verb phrases (:class:`VP`) are properties of a subject term:
``vp.emit(ctx, term)``.  A Wikidata property between ``s`` and ``o`` goes through its statement node, as the recorded
GenerateSparql observations show: ``s p:P ?st . ?st ps:P o .``, and a qualifier ``at <P…> v`` adds ``?st pq:P v .``;
a class is ``?x wdt:P31 wd:Q… .``.  Every name here is this project's; the shapes are the recorded ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from hqa.squall.lexer import Ref

K = Callable[[str], None]


class Ctx:
    """Variables and the pattern groups being written; ``order`` is the superlative ``(dir, var, offset)``."""

    def __init__(self) -> None:
        self.n = 0
        self.groups: list[list[str]] = [[]]
        self.order: tuple[str, str, int] | None = None
        self.select_extra: list[str] = []

    def var(self) -> str:
        self.n += 1
        return f"?x{self.n}"

    def add(self, item: str) -> None:
        self.groups[-1].append(item)

    def triple(self, s: str, p: str, o: str) -> None:
        self.add(f"{s} {p} {o} .")

    def push(self) -> None:
        self.groups.append([])

    def pop(self) -> str:
        return " ".join(self.groups.pop())

    def union(self, branches: list[Callable[[], None]]) -> None:
        """``{ b1 } UNION { b2 } …``: each branch writes its patterns into a group of its own."""
        parts = []
        for branch in branches:
            self.push()
            branch()
            parts.append("{ " + self.pop() + " }")
        self.add(" UNION ".join(parts))

    def as_var(self, term: str) -> str:
        """``term`` if it is a variable, else a fresh variable bound to it (``VALUES ?x { wd:Q… }``)."""
        if term.startswith("?"):
            return term
        v = self.var()
        self.add(f"VALUES {v} {{ {term} }} .")
        return v

    def set_order(self, direction: str, var: str, offset: int = 0) -> None:
        if self.order is None:
            self.order = (direction, var, offset)


_LOCAL_BAD = re.compile(r"[^A-Za-z0-9_]")


def _local(label: str) -> str:
    """A label-only term as a SPARQL local name (letters, digits, underscores)."""
    name = _LOCAL_BAD.sub("_", label.strip()) or "unknown"
    return name if name[0].isalpha() else "_" + name


def entity(ref: Ref) -> str:
    """An entity or class term: ``wd:Q5``; a label-only term stays an unresolved relative IRI ``<label>`` (HumanIQ
    emitted these unchanged; they match nothing on Wikidata)."""
    if ref.id:
        return "wd:" + ref.id
    return "<" + re.sub(r"[\s<>\"{}|^`\\]", "_", ref.label) + ">"


def prop(ref: Ref, ns: str) -> str:
    """A property in namespace ``ns`` (p / ps / pq / wdt): ``p:P179``; a label-only term is ``p:label``."""
    return f"{ns}:{ref.id}" if ref.id else f"{ns}:{_local(ref.label)}"


def statement(ctx: Ctx, s: str, p: Ref, o: str, quals: "Iterable[Qual]" = ()) -> str:
    """``s p:P ?st . ?st ps:P o .`` and the qualifiers ``quals`` on ``?st`` → the statement variable."""
    st = ctx.var()
    ctx.triple(s, prop(p, "p"), st)
    ctx.triple(st, prop(p, "ps"), o)
    for q in quals:
        q.emit(ctx, st)
    return st


# -- restrictions on a value ---------------------------------------------------------------------------------

OPS = {"gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "=", "ne": "!="}


@dataclass
class Restriction:
    """``greater than N`` / ``earlier than the <P> of X`` / ``whose year is (earlier than) N`` / ``between``."""

    op: str  # key of OPS, or "between" / "notbetween"
    operand: "NP | None" = None
    high: "NP | None" = None
    year: bool = False

    def emit(self, ctx: Ctx, v: str) -> None:
        def compare(subject: str) -> None:
            def with_low(lo: str) -> None:
                if self.op in ("between", "notbetween"):
                    assert self.high is not None

                    def with_high(hi: str) -> None:
                        cond = f"{subject} >= {lo} && {subject} <= {hi}"
                        ctx.add(f"FILTER ({cond}) ." if self.op == "between" else f"FILTER (!({cond})) .")

                    self.high.emit(ctx, with_high)
                elif self.op == "eq" and not self.year and subject.startswith("?") and not lo.startswith("?"):
                    ctx.add(f"VALUES {subject} {{ {lo} }} .")
                elif self.op in ("regex", "notregex"):
                    neg = "!" if self.op == "notregex" else ""
                    ctx.add(f"FILTER ({neg}regex(str({subject}), str({lo}), \"i\")) .")
                else:
                    ctx.add(f"FILTER ({subject} {OPS[self.op]} {lo}) .")

            assert self.operand is not None
            self.operand.emit(ctx, with_low)

        if self.year:
            y = ctx.var()
            ctx.add(f"BIND (year({v}) AS {y}) .")
            compare(y)
        else:
            compare(v)


# -- noun phrases --------------------------------------------------------------------------------------------


class NP:
    def emit(self, ctx: Ctx, k: K) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass
class Const(NP):
    """A named entity, number or string; relative clauses on it constrain it (``<Q44523:Twilight> that …``)."""

    term: str
    rels: list["VP"] = field(default_factory=list)

    @property
    def var(self) -> str:
        return self.term

    def emit(self, ctx: Ctx, k: K) -> None:
        for rel in self.rels:
            rel.emit(ctx, self.term)
        k(self.term)


@dataclass
class Head(NP):
    """A variable referent: ``a <Q5:human> that …``, ``which <Q11424:film>``, ``some thing``, the answer of ``who``.

    ``cls`` types it (``wdt:P31``); ``value`` pins it (``the <Q215380:musical_group> <Q28974:…>`` →
    ``VALUES ?x { wd:Q28974 }``); ``rels`` are its relative clauses; ``var`` is set when it is emitted (a gap in a
    relative clause refers to it)."""

    cls: str | None = None
    value: str | None = None
    rels: list["VP"] = field(default_factory=list)
    var: str | None = None
    fixed: str | None = None  # a variable chosen beforehand (the answer ?x1)

    def emit(self, ctx: Ctx, k: K) -> None:
        self.var = self.fixed or ctx.var()
        if self.value:
            ctx.add(f"VALUES {self.var} {{ {self.value} }} .")
        if self.cls:
            ctx.triple(self.var, "wdt:P31", self.cls)
        for rel in self.rels:
            rel.emit(ctx, self.var)
        k(self.var)


@dataclass
class Gap(NP):
    """The missing noun phrase of a relative clause (``… that <Q8684:Seoul> does not <P150:…>``): its head."""

    head: "Head | Relational | Const | Has | Qual"

    def emit(self, ctx: Ctx, k: K) -> None:
        assert self.head.var is not None
        k(self.head.var)


@dataclass
class Relational(NP):
    """``the <P57:director> of X`` (optionally ``at <P1545:series_ordinal> 3`` and a superlative): the value of X's
    property; with ``year`` the year of that value."""

    prop: Ref
    of: NP
    quals: list["Qual"] = field(default_factory=list)
    sup: "Sup | None" = None
    rels: list["VP"] = field(default_factory=list)
    var: str | None = None
    fixed: str | None = None

    def emit(self, ctx: Ctx, k: K) -> None:
        def body(o: str) -> None:
            v = self.var = self.fixed or ctx.var()
            statement(ctx, o, self.prop, v, self.quals)
            constrain(ctx, v, self.rels, None, self.sup)
            k(v)

        self.of.emit(ctx, body)


@dataclass
class Year(NP):
    """``the year of X`` → ``BIND (year(X) AS ?y)``."""

    of: NP
    fixed: str | None = None

    def emit(self, ctx: Ctx, k: K) -> None:
        def body(t: str) -> None:
            y = self.fixed or ctx.var()
            ctx.add(f"BIND (year({t}) AS {y}) .")
            k(y)

        self.of.emit(ctx, body)


@dataclass
class Coord(NP):
    """``X and Y`` (both) / ``X or Y`` (either: UNION)."""

    op: str
    items: list[NP]

    def emit(self, ctx: Ctx, k: K) -> None:
        if self.op == "and":
            for item in self.items:
                item.emit(ctx, k)
            return
        ctx.union([lambda item=item: item.emit(ctx, k) for item in self.items])


# -- verb phrases --------------------------------------------------------------------------------------------


class VP:
    def emit(self, ctx: Ctx, s: str) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass
class Sup:
    """``the (Nth) highest / lowest / earliest / latest``."""

    direction: str  # ASC | DESC
    offset: int = 0


def constrain(ctx: Ctx, v: str, rels: list["VP"], restriction: "Restriction | None", sup: "Sup | None",
              shown: bool = True) -> None:
    """What a phrase says of a value it introduced: relative clauses, a restriction, a superlative (whose value is
    then also selected, as in the recorded ``SELECT DISTINCT ?x1 ?x3 … ORDER BY DESC(?x3) LIMIT 1``)."""
    for rel in rels:
        rel.emit(ctx, v)
    if restriction:
        restriction.emit(ctx, v)
    if sup:
        ctx.set_order(sup.direction, v, sup.offset)
        if shown:
            ctx.select_extra.append(v)


@dataclass
class Qual:
    """``at <P…> v`` on a statement: ``?st pq:P v``; ``v`` may be absent (a fresh variable), restricted, a
    superlative (``at the earliest <P580:start_time>``) or the clause's gap."""

    prop: Ref
    value: NP | None = None
    restriction: Restriction | None = None
    sup: Sup | None = None
    answer: str | None = None  # the question's variable (``At which <P580:start_time> …``)
    rels: list["VP"] = field(default_factory=list)
    var: str | None = None

    def emit(self, ctx: Ctx, st: str) -> None:
        if self.value is not None:
            self.value.emit(ctx, lambda q: ctx.triple(st, prop(self.prop, "pq"), q))
            return
        v = self.var = self.answer or ctx.var()
        ctx.triple(st, prop(self.prop, "pq"), v)
        constrain(ctx, v, self.rels, self.restriction, self.sup, shown=v != self.answer)


@dataclass
class Has(VP):
    """``has <P> X [at <P'> v]*`` (also ``is-<P> X``, ``is <P> X``, ``whose <P> is X``, ``with <P> X``, the verb
    ``X <P> Y``): ``s p:P ?st . ?st ps:P X``; without X a fresh value, optionally restricted or a superlative."""

    prop: Ref
    obj: NP | None = None
    quals: list[Qual] = field(default_factory=list)
    restriction: Restriction | None = None
    sup: Sup | None = None
    rels: list["VP"] = field(default_factory=list)  # clauses on the fresh value (has a <P19:…> that …)
    var: str | None = None

    def emit(self, ctx: Ctx, s: str) -> None:
        if self.obj is not None:
            self.obj.emit(ctx, lambda o: statement(ctx, s, self.prop, o, self.quals))
            return
        v = self.var = ctx.var()
        statement(ctx, s, self.prop, v, self.quals)
        constrain(ctx, v, self.rels, self.restriction, self.sup)


@dataclass
class Inverse(VP):
    """``is a <P> of X [at <P'> v]*``: ``X p:P ?st . ?st ps:P s``."""

    prop: Ref
    of: NP
    quals: list[Qual] = field(default_factory=list)

    def emit(self, ctx: Ctx, s: str) -> None:
        self.of.emit(ctx, lambda o: statement(ctx, o, self.prop, s, self.quals))


@dataclass
class Most(VP):
    """``has the most <P>``: the subject with the largest number of P values (a grouped count sub-query)."""

    prop: Ref
    direction: str = "DESC"

    def emit(self, ctx: Ctx, s: str) -> None:
        s = ctx.as_var(s)
        c, n = ctx.var(), ctx.var()
        ctx.push()
        statement(ctx, s, self.prop, c)
        inner = ctx.pop()
        ctx.add(f"{{ SELECT DISTINCT {s} (COUNT(DISTINCT {c}) AS {n}) WHERE {{ {inner} }} GROUP BY {s} }}")
        ctx.set_order(self.direction, n)
        ctx.select_extra.append(n)


@dataclass
class Compare(VP):
    """``is X`` (equality) or ``is greater than X``."""

    restriction: Restriction

    def emit(self, ctx: Ctx, s: str) -> None:
        self.restriction.emit(ctx, s)


@dataclass
class Not(VP):
    vp: VP

    def emit(self, ctx: Ctx, s: str) -> None:
        ctx.push()
        self.vp.emit(ctx, s)
        ctx.add("FILTER NOT EXISTS { " + ctx.pop() + " }")


@dataclass
class And(VP):
    items: list[VP]

    def emit(self, ctx: Ctx, s: str) -> None:
        for item in self.items:
            item.emit(ctx, s)


@dataclass
class Or(VP):
    items: list[VP]

    def emit(self, ctx: Ctx, s: str) -> None:
        ctx.union([lambda item=item: item.emit(ctx, s) for item in self.items])


@dataclass
class Subject(VP):
    """A clause whose subject is another noun phrase and whose object is the gap: ``… that <Q8684:Seoul> does not
    <P150:…>``, ``How many <Q19020:…> <Q40531:John_Wayne> did <P166:award_received>``."""

    subject: NP
    vp: VP

    def emit(self, ctx: Ctx, s: str) -> None:
        self.subject.emit(ctx, lambda t: self.vp.emit(ctx, t))
