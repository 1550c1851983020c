"""A recursive-descent parser for the SQUALL Wikidata dialect of HumanIQ's few-shots (HumanIQ §3, generateQuery).

Grammar (informal; ``P`` a property term, ``C`` a class term, ``E`` an entity term, ``NP`` a noun phrase)::

    query    := "how many" count | "at which"/"at how many" qualifier-question | wh-question | yes/no-question
    wh       := (which|what|give me all) NOUN [VP] | (who|what|which) VP
    count    := NOUN [VP | "are there" | NP (did|does|has) VP-with-gap] | P (has|have) NP | P NP has
    yes/no   := (has|did|does) NP VP-rest | (is|was) NP (COMPARISON NP | copula-rest)
    NOUN     := [det] [superlative] C [E] REL* | [det] [sup] P [at QUAL]* of NP REL* | some thing REL*
    NP       := NP-atom ((and|or) [of] NP-atom)*        NP-atom := E | number | "string" | NOUN | ( NP )
    REL      := (that|which|who) (VP | NP VP-with-gap) | whose P (is NP | is COMPARISON | has year N)
              | with P NP | except NP
    VP       := VP-atom ([and|or] VP-atom)*
    VP-atom  := has [not] [det] (SUP P | most P | P [NP] [QUAL*] [RESTRICTION])
              | is-P [of] NP QUAL* | (is|are|was) [not] COPULA | (does|did) [not] P [NP] QUAL* | P NP QUAL*
    COPULA   := [det] [SUP] P (and P)* [QUAL*] of NP | P NP QUAL* | a C | year of NP | COMPARISON | NP
    QUAL     := at [det] [SUP] P [NP | RESTRICTION]
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hqa.squall import ast as A
from hqa.squall.lexer import Ref, SquallSyntaxError, Token, tokenize

DETS = {"a", "an", "the", "some", "any", "all"}
UP = {"highest", "latest", "largest", "greatest", "last", "biggest", "longest", "maximum"}
DOWN = {"lowest", "earliest", "smallest", "first", "shortest", "minimum"}
GT = {"greater", "higher", "larger", "bigger", "more", "later", "after", "longer", "older"}
LT = {"smaller", "lower", "less", "earlier", "before", "fewer", "shorter", "younger"}
COPULA = {"is", "are", "was", "were"}
HAVE = {"has", "have", "had"}
DO = {"does", "did", "do"}
RELPRO = {"that", "which", "who"}


@dataclass
class Query:
    """A parsed question: ``form`` SELECT / COUNT / ASK, the answer noun phrase (None for ASK) and its verb phrase."""

    form: str
    answer: A.NP | None
    vp: A.VP | None
    subject: A.NP | None = None  # ASK: the subject the VP is about
    extra: list = field(default_factory=list)


class Parser:
    def __init__(self, text: str):
        self.text = text
        self.toks: list[Token] = tokenize(text)
        while self.toks and self.toks[-1].kind == "punct" and self.toks[-1].text in "?,":
            self.toks.pop()
        self.i = 0
        self.gaps: list[A.Head] = []

    # -- token helpers -------------------------------------------------------------------------------------------
    def peek(self, n: int = 0) -> Token | None:
        j = self.i + n
        return self.toks[j] if j < len(self.toks) else None

    def at_word(self, *words: str, n: int = 0) -> bool:
        t = self.peek(n)
        return t is not None and t.kind == "word" and t.text in words

    def accept(self, *words: str) -> str | None:
        if self.at_word(*words):
            self.i += 1
            return self.toks[self.i - 1].text
        return None

    def expect(self, *words: str) -> str:
        got = self.accept(*words)
        if got is None:
            self.fail(f"expected {' / '.join(words)}")
        return got  # type: ignore[return-value]

    def fail(self, message: str) -> None:
        t = self.peek()
        where = f"at {t.text!r} (offset {t.pos})" if t else "at the end"
        raise SquallSyntaxError(f"{message} {where}", t.pos if t else len(self.text))

    def at_end(self) -> bool:
        return self.i >= len(self.toks)

    def is_ref(self, n: int = 0, kinds: str = "QP?") -> bool:
        t = self.peek(n)
        return t is not None and t.kind == "ref" and t.ref is not None and t.ref.kind in kinds

    def take_ref(self):
        t = self.peek()
        if t is None or t.kind != "ref":
            self.fail("expected a <Q…>/<P…> term")
        self.i += 1
        return t.ref

    # -- queries -------------------------------------------------------------------------------------------------
    def parse(self) -> Query:
        if not self.toks:
            raise SquallSyntaxError("empty query", 0)
        if self.accept("give"):
            self.expect("me")
            self.accept("all")
            q = self.wh_noun()
        elif self.at_word("how") and self.at_word("many", n=1):
            self.i += 2
            q = self.count()
        elif self.at_word("at") and self.at_word("which", "how", n=1):
            q = self.qualifier_question()
        elif self.at_word("which", "what", "who", "whom"):
            q = self.wh()
        elif self.at_word(*HAVE, *DO, *COPULA):
            q = self.yes_no()
        else:
            q = self.declarative_count()
        if not self.at_end():
            self.fail("unexpected words")
        return q

    def wh(self) -> Query:
        w = self.expect("which", "what", "who", "whom")
        if w in ("who", "whom") or self.at_word(*COPULA, *HAVE, *DO) or self.peek() is None:
            head = A.Head(fixed="?x1")
            self.gaps.append(head)
            vp = self.vp() if not self.at_end() else None
            self.gaps.pop()
            return Query("SELECT", head, vp)
        return self.wh_noun()

    def wh_noun(self) -> Query:
        head = self.noun(fixed="?x1")
        vp = None
        if not self.at_end():
            if self.starts_np() and not self.starts_vp() and isinstance(head, (A.Head, A.Relational)):
                self.gaps.append(head)  # Which <Q11424:film> <Q35332:Brad_Pitt> is the <P162:producer> of?
                vp = A.Subject(self.np(), self.vp())
                self.gaps.pop()
            else:
                vp = self.vp()
        return Query("SELECT", head, vp)

    def count(self) -> Query:
        """After "how many"."""
        if self.is_ref(kinds="P?") and self.at_word("are", "is", n=1) and self.at_word("there", n=2):
            p = self.take_ref()  # How many <P30:continent> are there?
            self.i += 2
            return Query("COUNT", A.Relational(p, A.Head()), None)
        if (self.is_ref(kinds="P") or (self.is_ref(kinds="?") and self.at_word(*HAVE, n=1))) \
                and not self.at_word("of", n=1) and not (self.at_word(*HAVE, n=1) and self.is_ref(2, kinds="P")):
            p = self.take_ref()
            head = A.Head()
            has_first = self.accept(*HAVE)  # How many <P527:has_part(s)> has <Q752241:Half-Life>?
            subj = self.np()
            if not has_first:  # How many <P26:spouse> <Q34296:Woodrow_Wilson> has?
                self.expect(*HAVE)
            return Query("COUNT", head, A.Subject(subj, A.Has(p, A.Gap(head))))
        head = self.noun()
        if self.accept("are", "is"):
            if self.accept("there"):
                return Query("COUNT", head, None)
            self.i -= 1
        vp = None
        if not self.at_end():
            self.gaps.append(head)
            vp = A.Subject(self.np(), self.vp()) if self.starts_np() and not self.starts_vp() else self.vp()
            self.gaps.pop()
        return Query("COUNT", head, vp)

    def declarative_count(self) -> Query:
        """``<Q44578:Titanic> <P166:award_received> how many <P527:…> of <Q19020:…>?``"""
        subj = self.np_atom()
        if not self.is_ref():
            self.fail("expected a question word or a property")
        p = self.take_ref()
        self.expect("how")
        self.expect("many")
        head = self.noun()
        return Query("COUNT", head, A.Subject(subj, A.Has(p, A.Gap(head))))

    def qualifier_question(self) -> Query:
        """``At which [earliest] <P580:start_time> had X <P39:…> Y?`` / ``At how many <P1686:for_work> …``."""
        self.expect("at")
        counting = bool(self.accept("how"))
        self.expect("many" if counting else "which")
        sup = self.sup()
        qp = self.take_ref()
        self.accept(*HAVE, *DO, *COPULA)
        head = A.Head()
        subj = self.np()
        qual = A.Qual(qp, sup=A.Sup(*sup) if sup else None)
        if self.at_word(*HAVE) and not self.is_ref(1):
            self.i += 1  # … has earliest <P577:…>: the qualifier is on that statement
            has = self.has_rest()
            if not isinstance(has, A.Has):
                self.fail("expected a property statement")
            has.quals.insert(0, qual)
        else:
            self.accept(*HAVE, *DO)
            p = self.take_ref()
            obj = self.np() if self.starts_np() else None
            has = A.Has(p, obj, [qual] + self.quals())
        return Query("COUNT" if counting else "SELECT", head, A.Subject(subj, has), extra=[qual])

    def yes_no(self) -> Query:
        aux = self.accept(*HAVE, *DO, *COPULA)
        subj = self.np()
        if aux in COPULA:
            r = self.comparison()
            vp = A.Compare(r) if r else self.copula()
        elif aux in HAVE:
            vp = self.has_rest()
        else:
            vp = self.verb_rest(gap_ok=False)
        rest = self.vp_tail([vp])
        return Query("ASK", None, rest, subject=subj)

    # -- noun phrases ------------------------------------------------------------------------------------------
    def starts_np(self) -> bool:
        t = self.peek()
        if t is None:
            return False
        if t.kind in ("ref", "num", "str", "ord"):
            return True
        if t.kind == "punct" and t.text == "(":
            return True
        return t.kind == "word" and (t.text in DETS or t.text in ("year", "thing", "something"))

    def starts_vp(self) -> bool:
        t = self.peek()
        return t is not None and (t.kind == "isv" or (t.kind == "word" and t.text in HAVE | COPULA | DO | {
            "whose", "with", "that", "which", "who", "except"}))

    def np(self) -> A.NP:
        items = [self.np_atom()]
        op = None
        while self.is_ref(kinds="Q?") and isinstance(items[-1], A.Const) and not self.at_word("of", n=1):
            items.append(self.np_atom())  # <Ethan_Coen> <Joel_Coen>: juxtaposed names, both
            op = "and"
        while self.at_word("and", "or"):
            save = self.i
            o = self.accept("and", "or")
            self.accept("of")
            if not self.starts_np() or (op and o != op):
                self.i = save
                break
            op = o
            items.append(self.np_atom())
        return items[0] if len(items) == 1 else A.Coord(op or "and", items)

    def np_atom(self) -> A.NP:
        t = self.peek()
        if t is None:
            self.fail("expected a noun phrase")
        if t.kind == "punct" and t.text == "(":
            self.i += 1
            inner = self.np()
            if not (self.peek() and self.peek().text == ")"):
                self.fail("expected )")
            self.i += 1
            return inner
        if t.kind in ("num", "str"):
            self.i += 1
            return A.Const(t.text)
        if t.kind == "word" and t.text == "year" and self.at_word("of", n=1):
            self.i += 2
            return A.Year(self.np())
        if t.kind == "ref" and not self.at_word("of", n=1):
            self.i += 1
            assert t.ref is not None
            const = A.Const(A.entity(t.ref))
            if self.at_word("that", "whose", "which", "who"):
                self.rels(const)  # a relative clause on a named entity constrains that entity
            return const
        return self.noun()

    def noun(self, fixed: str | None = None) -> A.NP:
        """A common noun phrase with its determiner, optional superlative, head term and relative clauses."""
        det = self.accept(*DETS)
        if self.at_word("year") and self.at_word("of", n=1):
            self.i += 2
            return A.Year(self.np(), fixed=fixed)
        sup = self.sup()
        if self.accept("thing", "something", "one", "person"):
            head = A.Head(fixed=fixed)
            self.rels(head)
            return head
        if not self.is_ref():
            if det and self.peek() and self.peek().kind == "word" and self.at_word("of", n=1):
                w = self.toks[self.i].text  # a bare word used as a relational noun: the <word> of X
                self.i += 1
                return self.relational(Ref(None, w), sup, fixed)
            self.fail("expected a <Q…>/<P…> term")
        ref = self.take_ref()
        if self.at_word("of") or self.at_word("at"):
            if ref.kind in "P?" or self.at_word("of"):
                return self.relational(ref, sup, fixed)
        head = A.Head(cls=A.entity(ref), fixed=fixed)
        if det and self.is_ref(kinds="Q") and not self.at_word("of", n=1):
            head.value = A.entity(self.take_ref())
        if sup:
            self.fail("a superlative needs a property")
        self.rels(head)
        return head

    def relational(self, ref, sup, fixed) -> A.NP:
        quals = self.quals()
        self.expect("of")
        rel = A.Relational(ref, self.np(), quals=quals, sup=A.Sup(*sup) if sup else None, fixed=fixed)
        self.rels(rel)
        return rel

    def rels(self, head: "A.Head | A.Relational") -> None:
        self.gaps.append(head)
        try:
            while True:
                save = self.i
                self.accept("and")
                if self.at_word("and", n=-1) and self.i > 0 and self.starts_vp() and not self.at_word(*RELPRO) \
                        and not self.at_word("whose", "with", "except") and head.rels:
                    head.rels.append(self.vp_atom())  # … that has A and has B
                elif self.accept(*RELPRO):
                    if self.starts_np() and not self.starts_vp() and not self.at_word("a", "an", "the"):
                        head.rels.append(A.Subject(self.np(), self.vp_atom()))
                    else:
                        head.rels.append(self.vp_atom())
                elif self.at_word("whose", "with", "except"):
                    head.rels.append(self.vp_atom())
                else:
                    self.i = save
                    return
        finally:
            self.gaps.pop()

    # -- superlatives, comparisons, qualifiers ----------------------------------------------------------------
    def sup(self) -> tuple[str, int] | None:
        t = self.peek()
        offset = 0
        if t is not None and t.kind == "ord" and self.at_word(*UP, *DOWN, n=1):
            offset = int(t.text[:-2]) - 1
            self.i += 1
        if self.accept(*UP):
            return ("DESC", offset)
        if self.accept(*DOWN):
            return ("ASC", offset)
        if offset:
            self.fail("expected highest / lowest / earliest / latest")
        return None

    def comparison(self) -> A.Restriction | None:
        """``greater than X``, ``earlier than X``, ``greater or equal to X``, ``equal to X``, ``(not) between X and
        Y``; None when none starts here."""
        save = self.i
        neg = bool(self.accept("not"))
        if self.accept("between"):
            low = self.np_atom()
            self.expect("and")
            return A.Restriction("notbetween" if neg else "between", low, self.np_atom())
        op = None
        w = self.accept(*GT, *LT)
        if w:
            op = "gt" if w in GT else "lt"
            if self.accept("or"):
                self.expect("equal")
                self.accept("to")
                op = "ge" if op == "gt" else "le"
            else:
                self.expect("than", "tha")
        elif self.accept("equal"):
            self.accept("to")
            op = "eq"
        elif self.accept("matching", "matches", "match"):
            op = "regex"
        if op is None:
            self.i = save
            return None
        if neg:
            op = {"gt": "le", "lt": "ge", "ge": "lt", "le": "gt", "eq": "ne", "regex": "notregex"}[op]
        return A.Restriction(op, self.operand())

    def operand(self) -> A.NP:
        node = self.np_atom()
        if isinstance(node, A.Const) and self.is_ref(kinds="Q") and not self.at_word("of", n=1):
            self.i += 1  # a unit after a number (15000 <Q3710:foot>) is not part of the value
        return node

    def value_restriction(self) -> A.Restriction | None:
        """``whose year is [COMPARISON] N`` / ``has year N`` / a bare COMPARISON, on a value."""
        save = self.i
        if self.accept("whose", "whsoe"):
            if self.accept("year"):
                self.expect(*COPULA)
                r = self.comparison()
                if r is None:
                    return A.Restriction("eq", self.operand(), year=True)
                r.year = True
                return r
            self.i = save
            return None
        return self.comparison()

    def quals(self) -> list[A.Qual]:
        out = []
        while self.at_word("at") and not self.at_word("which", "how", n=1):
            self.i += 1
            self.accept("with")
            self.accept(*DETS)
            sup = self.sup()
            p = self.take_ref()
            q = A.Qual(p, sup=A.Sup(*sup) if sup else None)
            if not sup:
                r = self.value_restriction()
                if r is not None:
                    q.restriction = r
                elif self.starts_np():
                    q.value = self.np_atom()
                elif self.gaps and not self.at_word("and") and self.at_end():
                    q.value = A.Gap(self.gaps[-1])
                if q.value is None and self.at_word("that", "whose", "which", "who"):
                    self.rels(q)  # at a <P453:character_role> that is …: clauses on the qualifier value
            out.append(q)
        return out

    # -- verb phrases --------------------------------------------------------------------------------------------
    def vp(self) -> A.VP:
        return self.vp_tail([self.vp_atom()])

    def vp_tail(self, items: list[A.VP]) -> A.VP:
        op = "and"
        while True:
            save = self.i
            o = self.accept("and", "or")
            if o:
                self.accept("that", "which", "who")
                self.accept("also")
            if self.starts_vp() or self.is_ref(kinds="P"):
                op = "or" if o == "or" else op
                try:
                    items.append(self.vp_atom())
                    continue
                except SquallSyntaxError:
                    pass  # not a verb phrase after all: the coordination ends before it
            self.i = save
            break
        if len(items) == 1:
            return items[0]
        return A.Or(items) if op == "or" else A.And(items)

    def vp_atom(self) -> A.VP:
        t = self.peek()
        if t is None:
            self.fail("expected a verb phrase")
        if t.kind == "isv":
            self.i += 1
            p = self.take_ref()
            if self.accept("of"):
                return A.Inverse(p, self.np_or_gap(), self.quals())
            return A.Has(p, self.np_or_gap(), self.quals())
        if t.kind == "ref":
            return self.verb_rest(gap_ok=True)
        w = t.text
        if w in HAVE | COPULA | DO:
            self.i += 1
            neg = bool(self.accept("not"))
            nxt = self.peek(1)
            if w in HAVE:
                vp = self.has_rest()
            elif w in COPULA:
                r = self.comparison()
                vp = A.Compare(r) if r else self.copula()
            elif self.is_ref(kinds="Q?") and (self.is_ref(1, kinds="P?") or (nxt is not None and nxt.kind == "word")):
                subj = self.np_atom()  # which <Q…> does <Q51803:Chewbacca> belong to: subject, verb, gap
                vp = A.Subject(subj, self.verb_rest(gap_ok=True))
            else:
                vp = self.verb_rest(gap_ok=True)
            return A.Not(vp) if neg else vp
        if w == "whose":
            self.i += 1
            p = self.take_ref()
            if self.accept("has"):
                self.expect("year")
                return A.Has(p, restriction=A.Restriction("eq", self.operand(), year=True))
            self.expect(*COPULA)
            r = self.comparison()
            if r is not None:
                return A.Has(p, restriction=r)
            return A.Has(p, self.np(), self.quals())
        if w == "with":
            self.i += 1
            return self.has_rest()
        if w == "except":
            self.i += 1
            return A.Compare(A.Restriction("ne", self.np()))
        self.fail("expected a verb phrase")
        raise AssertionError  # unreachable

    def np_or_gap(self) -> A.NP:
        if self.starts_np():
            return self.np()
        if self.gaps:
            return A.Gap(self.gaps[-1])
        self.fail("expected a noun phrase")
        raise AssertionError

    def verb_rest(self, gap_ok: bool) -> A.VP:
        """A property used as a transitive verb: ``<P166:award_received> <Q103360:…> [at …]`` (object may be the
        gap)."""
        if self.peek() is not None and self.peek().kind == "word":
            p = Ref(None, self.toks[self.i].text)  # a bare verb: does X belong to
            self.i += 1
            self.accept("to", "in", "for", "with", "by", "on")
        else:
            p = self.take_ref()
        quals = self.quals()
        obj = self.np() if self.starts_np() else A.Gap(self.gaps[-1]) if gap_ok and self.gaps else None
        return A.Has(p, obj, quals + self.quals())

    def has_rest(self) -> A.VP:
        """After has / have / had / with."""
        self.accept(*DETS)
        if self.accept("most"):
            return A.Most(self.take_ref())
        self.accept("the")
        sup = self.sup()
        if sup:
            p = self.take_ref()
            return A.Has(p, quals=self.quals(), sup=A.Sup(*sup))
        self.accept("as")  # "has not as <P2360:intended_public> X": the property after "as"
        if self.peek() is not None and self.peek().kind == "word" and not self.starts_vp() and \
                self.peek().text not in DETS | {"not", "and", "or", "at", "year", "whose"}:
            p = Ref(None, self.toks[self.i].text)  # a bare word as the property: has continent <Q46:Europe>
            self.i += 1
        else:
            p = self.take_ref()
        quals = self.quals()
        obj = None
        restriction = self.value_restriction()
        if restriction is None and self.starts_np():
            obj = self.np()
            quals += self.quals()
        elif restriction is not None:
            quals += self.quals()
        has = A.Has(p, obj, quals, restriction)
        if obj is None and self.at_word("that", "whose", "which", "who"):
            self.rels(has)  # has a <P19:place_of_birth> that has …: clauses on the value
        return has

    def copula(self) -> A.VP:
        """After is / are / was (and an optional not)."""
        det = self.accept(*DETS)
        if self.accept("year"):
            self.expect("of")
            return _YearIs(self.np())
        sup = self.sup()
        if self.is_ref():
            save = self.i
            props = [self.take_ref()]
            while self.at_word("and") and (self.is_ref(1) or (self.at_word(*DETS, n=1) and self.is_ref(2))) \
                    and self._props_then_of(1):
                self.i += 1
                self.accept(*DETS)
                props.append(self.take_ref())
            quals = self.quals()
            if self.accept("of"):
                of = self.np_or_gap()
                quals += self.quals()
                vps: list[A.VP] = [_InverseSup(p, of, quals, A.Sup(*sup) if sup else None) for p in props]
                return vps[0] if len(vps) == 1 else A.And(vps)
            self.i = save
            ref = self.take_ref()
            if det in ("a", "an") and ref.kind in "Q?":
                head = A.Head(cls=A.entity(ref))
                self.rels(head)
                return _IsA(head)
            if ref.kind == "P" or self.starts_np():
                quals = self.quals()
                obj = self.np_or_gap()
                return A.Has(ref, obj, quals + self.quals())
            self.i = save
        if sup:
            self.fail("a superlative needs a property")
        return A.Compare(A.Restriction("eq", self.np()))

    def _props_then_of(self, n: int) -> bool:
        """Whether the words from offset ``n`` are ``[det] P (and [det] P)* of`` (coordinated relational nouns)."""
        j = n
        while True:
            if self.at_word(*DETS, n=j):
                j += 1
            if not self.is_ref(j):
                return False
            j += 1
            if self.at_word("of", n=j):
                return True
            if not self.at_word("and", n=j):
                return False
            j += 1


class _YearIs(A.VP):
    """``is the year of X``: the subject is ``year(X)``."""

    def __init__(self, of: A.NP):
        self.of = of

    def emit(self, ctx: A.Ctx, s: str) -> None:
        if s.startswith("?"):
            self.of.emit(ctx, lambda t: ctx.add(f"BIND (year({t}) AS {s}) ."))
        else:
            self.of.emit(ctx, lambda t: ctx.add(f"FILTER (year({t}) = {s}) ."))


class _InverseSup(A.Inverse):
    """``is the [highest] <P> of X``: an inverse statement, optionally a superlative on the subject."""

    def __init__(self, prop, of, quals, sup):
        super().__init__(prop, of, quals)
        self.sup = sup

    def emit(self, ctx: A.Ctx, s: str) -> None:
        super().emit(ctx, s)
        if self.sup:
            ctx.set_order(self.sup.direction, s, self.sup.offset)


class _IsA(A.VP):
    """``is a C [that …]``: the subject is of class C (and satisfies C's relative clauses)."""

    def __init__(self, head: A.Head):
        self.head = head

    def emit(self, ctx: A.Ctx, s: str) -> None:
        self.head.var = s
        ctx.triple(s, "wdt:P31", self.head.cls or "")
        for rel in self.head.rels:
            rel.emit(ctx, s)


def parse(text: str) -> Query:
    """Parse one SQUALL query; raises SquallSyntaxError."""
    return Parser(text).parse()
