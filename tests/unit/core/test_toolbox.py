"""The toolbox is the only builder and cache of run-time parts: parts handed in are checked by name, a view is an
explicit copy sharing the toolbox's caches, and no other module of hqa/ keeps state in an object's ``__dict__``."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest

from hqa.config import load_settings
from hqa.toolbox import Toolbox

HQA = Path(__file__).resolve().parents[3] / "hqa"

#: the ``__dict__`` writes outside hqa/toolbox.py that hold no toolbox state: (module, function, key) → why
#: (key None: any key of that function's writes)
NOT_TOOLBOX_STATE = {
    ("hqa/lm/calls.py", "name_predictors", "NAME_ATTR"): "a predictor's name, travelling with it through deep copies",
    ("hqa/answering/grounded.py", "choose", "NAME_ATTR"): "the grounded step named as its predictor",
    ("hqa/lm/models.py", "__setstate__", None): "the embedded LM restoring its own pickled state",
    ("hqa/jobs/budget.py", "on_lm_start", "'open'"): "the budget guard's per-thread list of open LM calls",
}
MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}


def _is_dict_of_object(node: ast.AST) -> bool:
    """``x.__dict__`` or ``vars(x)``."""
    return ((isinstance(node, ast.Attribute) and node.attr == "__dict__")
            or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars"
                and len(node.args) == 1))


def dict_writes(tree: ast.AST) -> list[tuple[str, str | None, int, str]]:
    """Every write to an object's ``__dict__`` in ``tree``: ``(enclosing function, key or None, line, source)``.
    Writes are ``d[k] = v`` / ``del d[k]`` / ``d[k] += v``, ``d.update(...)``, ``d.setdefault(k, ...)`` and the
    other mutating methods, and ``x.__dict__ = ...``, with ``d`` being ``x.__dict__`` or ``vars(x)``; and a
    ``WeakKeyDictionary`` (a side cache keyed by another object)."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        targets = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Subscript) and _is_dict_of_object(target.value):
                found.append((function, ast.unparse(target.slice), node.lineno, ast.unparse(target)))
            elif isinstance(target, ast.Attribute) and target.attr == "__dict__":
                found.append((function, None, node.lineno, ast.unparse(target)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in MUTATORS and _is_dict_of_object(node.func.value):
                key = ast.unparse(node.args[0]) if node.args and node.func.attr != "update" else None
                found.append((function, key, node.lineno, ast.unparse(node)))
            elif node.func.attr == "WeakKeyDictionary":
                found.append((function, None, node.lineno, ast.unparse(node)))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "<module>")
    return found


def foreign_dict_writes(root: Path) -> list[str]:
    """The ``__dict__`` writes of every module under ``root`` but hqa/toolbox.py, less :data:`NOT_TOOLBOX_STATE`."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        if rel == "hqa/toolbox.py":
            continue
        for function, key, line, source in dict_writes(ast.parse(path.read_text(encoding="utf-8"))):
            if (rel, function, key) not in NOT_TOOLBOX_STATE and (rel, function, None) not in NOT_TOOLBOX_STATE:
                out.append(f"{rel}:{line} in {function}: {source}")
    return out


def test_no_module_but_the_toolbox_keeps_state_in_an_objects_dict():
    """A part built outside the toolbox (written into its ``__dict__``, or cached beside it keyed by it) is a second
    owner; the toolbox gets a part (:class:`hqa.toolbox.part`) instead."""
    assert foreign_dict_writes(HQA) == []
    assert (HQA / "lm/calls.py").exists() and (HQA / "answering/grounded.py").exists()


def test_the_scan_sees_each_kind_of_write():
    source = """
import weakref
def f(tb, name):
    tb.__dict__["agent_pages"] = 1
    tb.__dict__.setdefault("detllm_indexes", {})
    vars(tb).update(x=1)
    del tb.__dict__[name]
    tb.__dict__ = {}
_CACHE = weakref.WeakKeyDictionary()
def reads(tb):
    return tb.__dict__.get("relations"), "dense" in tb.__dict__, vars(tb)["x"]
"""
    writes = dict_writes(ast.parse(source))
    assert [(f, k) for f, k, _line, _src in writes] == [
        ("f", "'agent_pages'"), ("f", "'detllm_indexes'"), ("f", None), ("f", "name"), ("f", None),
        ("<module>", None)]


@pytest.fixture()
def settings(tmp_path):
    return load_settings(Path("/nonexistent-hqa.toml"), environ={}, paths_artifacts=str(tmp_path))


class Linker:
    """A linker with one property record (what the relation linker reads) and no network."""

    entities = {"P19": {"id": "P19", "label": "place of birth", "description": "", "aliases": ["born in"]}}

    def link(self, mention, question=None, k=5):
        return []


def dense(query, k=5):
    return []


def test_parts_handed_in_are_checked_and_reported(settings):
    with pytest.raises(TypeError, match="no part named 'guard'"):
        Toolbox(settings, dense=dense, guard=object())
    tb = Toolbox(settings, dense=dense, linker=Linker())
    assert tb.built() == {"dense", "linker"} and tb.injected("dense") and not tb.injected("relations")
    assert {"dense", "agent_pages", "relations", "sparql", "world"} <= Toolbox.part_names()
    relations = tb.relations  # built on first use, from the toolbox's linker, then kept
    assert tb.relations is relations and "P19" in relations.properties and not tb.injected("relations")
    assert tb.built() == {"dense", "linker", "relations"}
    with pytest.raises(AttributeError, match="hand one in"):
        tb.dense = lambda q, k=5: []
    assert tb.dense is dense


def test_a_view_is_a_copy_that_shares_the_toolboxs_parts(settings):
    other = lambda q, k=5: []  # noqa: E731
    tb = Toolbox(settings, dense=dense, passages=[{"id": "p1", "title": "Gabon", "text": "Gabon is a country."}],
                 linker=Linker())
    view = tb.view(dense=other, text_bm25=None)
    assert isinstance(view, Toolbox) and view is not tb and copy.deepcopy(view) is view
    assert view.dense is other and tb.dense is dense and view.text_bm25 is None
    assert view.injected("dense") and view.injected("text_bm25") and not tb.injected("text_bm25")
    assert view.relations is tb.relations  # built once, kept by the toolbox the view came from
    pages = view.agent_pages  # built from the toolbox's own parts, never the view's replacements
    assert pages is tb.agent_pages and pages.dense is dense and "agent_pages" in tb.built()
    assert view.view(bm25=dense).dense is other and view.view(bm25=dense).relations is tb.relations
    index = view.doc_index("text", "sparse")
    assert tb.doc_index("text", "sparse") is index and [e.meta["id"] for e in index("Gabon", 1)] == ["p1"]
    with pytest.raises(TypeError, match="no part named 'guard'"):
        tb.view(guard=1)


def test_a_backend_remembers_the_labels_it_asked_for():
    from hqa.retrievers.sparql.backends import SparqlStore

    class Store(SparqlStore):
        local_labels = False
        queries: list[str] = []

        def where(self):
            return "a test store"

        def _execute(self, full):
            self.queries.append(full)
            return {"rows": [{"e": "http://www.wikidata.org/entity/Q1", "l": "universe"},
                             {"e": "http://www.wikidata.org/entity/P31", "l": "instance of"}],
                    "variables": ["e", "l"], "truncated": False}

    store = Store()
    assert store.labels(["Q1", " P31 ", "not an id"]) == {"Q1": "universe", "P31": "instance of"}
    assert len(store.queries) == 1 and "wd:Q1" in store.queries[0] and "wdt:P31 wd:P31" in store.queries[0]
    assert store.labels(["Q1", "P31"]) == {"Q1": "universe", "P31": "instance of"}
    assert len(store.queries) == 1  # remembered: no second query
