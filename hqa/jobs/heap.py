"""The collector's policy while many questions run in one process: ``hqa evaluate`` (and the jobs built on it) and
``hqa serve``.

CPython's cyclic garbage collector stops every thread while it runs.  An opened program holds a few hundred thousand
long-lived objects (indexes, the embedder's session, DSPy modules, pydantic models, the memos), and each full
collection walks all of them: measured under 64 concurrent DETLLM questions, the three full collections of a level of
about 20 seconds took 1.0-1.7 s together, the longest up to 1.1 s with every question's thread stopped
(docs/benchmarks.md, "LM-bound throughput").  While questions run, :func:`settled` therefore

* freezes what exists when they start (:func:`gc.freeze`: moved to a permanent generation that no collection walks;
  they are still freed by reference counting), and
* collects the youngest generation after :data:`YOUNG_THRESHOLD` new container objects rather than CPython's 700,
  so the objects of the questions in flight are walked less often;

and puts both back afterwards (:func:`gc.unfreeze`, the thresholds in effect before).  Nested and concurrent uses
share one freeze: the first to enter sets it, the last to leave restores it.
"""

from __future__ import annotations

import contextlib
import gc
import threading

#: allocations (net new container objects) between two collections of the youngest generation while questions run;
#: CPython's default is 700.  It cut the collector's time in a level of 384 DETLLM questions at 64 from 0.6-1.0 s to
#: 0.3-0.4 s; efficiency did not differ measurably (docs/benchmarks.md, "LM-bound throughput")
YOUNG_THRESHOLD = 7000

_lock = threading.Lock()
_users = 0
_before: tuple[int, ...] | None = None


def _enter() -> None:
    global _users, _before
    with _lock:
        _users += 1
        if _users == 1:
            _before = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(max(YOUNG_THRESHOLD, _before[0]), *_before[1:])


def _leave() -> None:
    global _users, _before
    with _lock:
        _users -= 1
        if _users == 0:
            gc.set_threshold(*_before)
            gc.unfreeze()
            _before = None


class Hold:
    """One user's share of the policy, taken and given back at most once each: :meth:`take` after
    :meth:`give_back` does nothing (a server whose warm-up ends after it shut down)."""

    def __init__(self):
        self._state = "new"
        self._mine = threading.Lock()

    def take(self) -> None:
        with self._mine:
            if self._state == "new":
                _enter()
                self._state = "held"

    def give_back(self) -> None:
        with self._mine:
            if self._state == "held":
                _leave()
            self._state = "done"


@contextlib.contextmanager
def settled():
    """The policy for the block: see the module's docstring."""
    hold = Hold()
    hold.take()
    try:
        yield
    finally:
        hold.give_back()
