"""The run-time side of per-question few-shot selection of human solution processes with a DPP (HumanIQ §2).

:class:`hqa.optimize.compile.DPPFewShot` (the teleprompter) returns a :class:`DPPProgram`.  For every call
it embeds the question, picks ``k`` human demos (relevance × action-sequence diversity, see
:mod:`hqa.artifacts.dpp`), deep-copies the student, puts the demos on the student's predictors and runs it.  The
student itself is never mutated, so one ``DPPProgram`` can serve many threads at once.

A library may hold several variants of the processes (``HumanDemo.variant``: ``full``, or the late-fusion halves
``wikipedia`` / ``wikidata``); ``demo_variants`` names the variant each predictor draws from, and each variant is
selected among its own demos (its own action sequences for the diversity term), so the ``hqa`` agent, the late-fusion
pipelines and any other predictor that takes human processes get the same selection method.

Persistence follows dspy's ``save``/``load``: :meth:`DPPProgram.dump_state` returns the wrapped program's state
(flat, as dspy writes it) plus a ``"dpp"`` entry holding the demo library, ``k``, ``mode``, ``seed``, the embedder
name and the demo builders' import paths.  ``DPPProgram(student).load("x.json")`` restores all of it and re-embeds
the library, so the same question selects the same demos.
"""

from __future__ import annotations

import logging
import threading
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import dspy
import numpy as np

from hqa.data.datasets import question_key
from hqa.data.human import HumanDemo
from hqa.lm.calls import keep_recording
from hqa.errors import ArtifactError, ConfigError
from hqa.registry import resolve
from hqa.artifacts.dpp import MODES, action_similarity, select_demos

logger = logging.getLogger(__name__)

STATE_KEY = "dpp"
STATE_VERSION = 1

DemoBuilder = Callable[[HumanDemo], Any]
Embedder = Callable[[Sequence[str]], np.ndarray]


def default_demo_builders() -> dict[str, DemoBuilder]:
    """What the hqa agent declares for its step predictor (``HumanIQAgent.human_demo_builders``): the complete human
    solution process as one demo — the same builder ``hqa compile --optimizer dpp-human`` uses."""
    from hqa.programs.humaniq import human_react_demo

    return {"react": human_react_demo}


def _callable_ref(fn: Callable) -> str | None:
    """``"module:qualname"`` when ``fn`` can be imported back by that name, else ``None``."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        return None
    ref = f"{module}:{qualname}"
    try:
        return ref if _resolve_ref(ref) == fn else None
    except Exception:
        return None


# builders programs saved before the agent's step demo had one definition (hqa.programs.humaniq.human_react_demo)
_RENAMED_REFS = {"hqa.data.human:HumanDemo.to_agent_example": "hqa.programs.humaniq:human_react_demo"}


def _resolve_ref(ref: str) -> Callable:
    obj = resolve(_RENAMED_REFS.get(ref, ref))
    if not callable(obj):
        raise TypeError(f"{ref} is not callable")
    return obj


def _embedder_name(embedder: str | Embedder | None) -> str:
    if embedder is None or isinstance(embedder, str):
        from hqa.retrievers.embedding.encoders import DEFAULT_EMBEDDER

        return embedder or DEFAULT_EMBEDDER
    ref = _callable_ref(embedder) or getattr(embedder, "name", None) or type(embedder).__qualname__
    return f"custom:{ref}"


class _Ref:
    """Holds a callable that deep copies of the program share (a model behind an embedder must not be copied)."""

    def __init__(self, value: Any):
        self.value = value

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self


class _Runtime(_Ref):
    """Derived, read-only selection data (embeddings, action similarity).  Shared by copies, as a :class:`_Ref`, and
    dropped on pickling: it is rebuilt from the library when needed."""

    def __init__(self, vecs: np.ndarray | None, similarity: np.ndarray, norm_questions: list[str], dups: set[int]):
        self.vecs = vecs
        self.similarity = similarity
        self.norm_questions = norm_questions
        self.dups = frozenset(dups)

    def __reduce__(self):
        return (type(None), ())


_BUILD_LOCK = threading.Lock()


#: the selection modes that embed the questions
VECTOR_MODES = ("dpp", "relevance")


def _check_embedder(name: str, mode: str) -> None:
    """A program saved with a custom embedder cannot embed without it (no callable was passed in)."""
    if name.startswith("custom:") and mode in VECTOR_MODES:
        raise ArtifactError(f"this program was saved with a custom embedder ({name[7:]}); "
                            "pass the same embedder= to DPPProgram before load()")


def check_selector(mode: str, k: int) -> None:
    if mode not in MODES:
        raise ConfigError(f"unknown demo selection mode {mode!r}; expected one of {', '.join(MODES)}")
    if int(k) < 0:
        raise ConfigError(f"k must be >= 0, got {k}")


class DPPProgram(dspy.Module):
    """Wraps a student program; each call gets its own k human demos chosen by a DPP.

    ``forward(question, **kwargs)`` calls the student with ``question=question, **kwargs`` and returns its
    prediction with ``selected_demos`` (the demo ids, in selection order) added, and ``trace["demos"]`` too when
    the prediction carries a dict ``trace``.
    """

    def __init__(self, program: dspy.Module, library: Sequence[HumanDemo] | None = None, *, k: int = 3,
                 mode: str = "dpp", seed: int = 0, embedder: str | Embedder | None = None,
                 demo_builders: dict[str, DemoBuilder] | None = None, demo_variants: dict[str, str] | None = None):
        super().__init__()
        check_selector(mode, k)
        self.program = program
        self.demo_variants = dict(demo_variants or {})  # predictor -> library variant; "full" when not named
        self.library: list[HumanDemo] = list(library or [])
        self.k = int(k)
        self.mode = mode
        self.seed = int(seed)
        self._embedder = _Ref(embedder if callable(embedder) else None)
        self.embedder_name = _embedder_name(embedder)
        self.demo_builders = dict(default_demo_builders() if demo_builders is None else demo_builders)
        self._builders_default = demo_builders is None
        self._runtime: _Runtime | None = None

    # -- embeddings ----------------------------------------------------------------------------------------------
    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        fn = self._embedder.value
        if fn is not None:
            vecs = np.asarray(fn(list(texts)), dtype=np.float32).reshape(len(texts), -1)
            return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), np.float32(1e-12))
        _check_embedder(self.embedder_name, self.mode)
        from hqa.retrievers.embedding.encoders import embed

        return embed(list(texts), self.embedder_name)

    def _query_vector(self, question: str) -> np.ndarray:
        if self._embedder.value is not None:
            return self._embed([question])[0]
        _check_embedder(self.embedder_name, self.mode)
        from hqa.retrievers.embedding.memo import query_vector

        return query_vector(question, self.embedder_name)

    def _needs_vectors(self) -> bool:
        return self.mode in VECTOR_MODES

    def prepare(self) -> DPPProgram:
        """Embed the library and precompute the action similarity now (otherwise done on the first call)."""
        self._ensure_runtime()
        return self

    def _ensure_runtime(self) -> _Runtime:
        rt = self._runtime
        if rt is not None:
            return rt
        with _BUILD_LOCK:
            if self._runtime is None:
                norm = [question_key(d.question) for d in self.library]
                seen: set[str] = set()
                dups = set()
                for i, q in enumerate(norm):
                    key = f"{self.library[i].variant}\x00{q}"  # the same question in another variant is no dup
                    if key in seen:
                        dups.add(i)
                    seen.add(key)
                vecs = self._embed([d.question for d in self.library]) if self._needs_vectors() and norm else None
                sim = action_similarity([d.actions for d in self.library])
                self._runtime = _Runtime(vecs, sim, norm, dups)
            return self._runtime

    # -- selection -------------------------------------------------------------------------------------------------
    def select(self, question: str, variant: str | None = None, dataset: str | None = None) -> list[HumanDemo]:
        """The demos this program would use for ``question`` (deterministic for a given question and state), among
        the library's demos of ``variant`` (all of them when None) and of the HumanIQ benchmark ``dataset`` (all when
        None; a program's own library, whose demos name no HumanIQ benchmark, is never filtered).

        Never a demo whose normalised question equals ``question`` (leakage guard), and never two demos with the
        same normalised question.
        """
        if not self.library or self.k == 0:
            return []
        rt = self._ensure_runtime()
        nq = question_key(question)
        exclude = set(rt.dups) | {i for i, q in enumerate(rt.norm_questions) if q == nq}
        if variant is not None:
            exclude |= {i for i, d in enumerate(self.library) if d.variant != variant}
        if dataset is not None:
            from hqa.data.human import DATASETS

            exclude |= {i for i, d in enumerate(self.library) if d.dataset in DATASETS and d.dataset != dataset}
        query_vec = self._query_vector(question) if self._needs_vectors() else None
        rng = np.random.default_rng([self.seed, zlib.crc32(nq.encode("utf-8"))]) if self.mode == "random" else None
        picks = select_demos(query_vec, rt.vecs, [d.actions for d in self.library], self.k, mode=self.mode, rng=rng,
                             exclude=exclude, similarity=rt.similarity)
        return [self.library[i] for i in picks]

    def variant_of(self, predictor: str) -> str:
        return self.demo_variants.get(predictor, "full")

    def select_all(self, question: str) -> dict[str, list[HumanDemo]]:
        """Per variant the predictors draw from: the demos selected for ``question``.  Without ``demo_variants``
        (the agent's case, and programs saved before variants) the library is selected as a whole."""
        if not self.demo_variants:
            return {"full": self.select(question)}
        return {v: self.select(question, v) for v in sorted({self.variant_of(n) for n in self.demo_builders})}

    def _program_for(self, question: str) -> tuple[dspy.Module, list[str]]:
        """A copy of the student with the demos selected for ``question``, and their ids."""
        chosen = self.select_all(question)
        prog = self.program.deepcopy()
        keep_recording(prog)  # DSPy's copy drops the predictors' callbacks
        for name, predictor in prog.named_predictors():
            builder = self.demo_builders.get(name)
            if builder is not None:
                predictor.demos = [x for x in map(builder, chosen.get(self.variant_of(name), [])) if x is not None]
        return prog, [d.id for demos in chosen.values() for d in demos]

    @staticmethod
    def _annotate(pred: Any, ids: list[str]) -> Any:
        if isinstance(pred, dict):
            pred["selected_demos"] = list(ids)
            trace = pred.get("trace")
        else:
            try:
                pred.selected_demos = list(ids)
            except Exception:  # pragma: no cover - exotic return types
                logger.debug("cannot attach selected_demos to %r", type(pred))
            try:
                trace = pred.get("trace") if hasattr(pred, "get") else getattr(pred, "trace", None)
            except Exception:  # pragma: no cover
                trace = None
        if isinstance(trace, dict):
            trace["demos"] = list(ids)
        return pred

    def forward(self, question: str, **kwargs):
        prog, ids = self._program_for(question)
        return self._annotate(prog(question=question, **kwargs), ids)

    async def aforward(self, question: str, **kwargs):
        prog, ids = self._program_for(question)
        return self._annotate(await prog.acall(question=question, **kwargs), ids)

    # -- persistence -----------------------------------------------------------------------------------------------
    def _builder_refs(self) -> dict[str, str | None]:
        return {name: _callable_ref(fn) for name, fn in self.demo_builders.items()}

    def dump_state(self, json_mode: bool = True) -> dict[str, Any]:
        state = super().dump_state(json_mode=json_mode)
        if STATE_KEY in state:  # pragma: no cover - a predictor literally named "dpp" at top level
            raise ArtifactError(f"the wrapped program has a parameter named {STATE_KEY!r}; rename it")
        state[STATE_KEY] = {
            "version": STATE_VERSION,
            "k": self.k,
            "mode": self.mode,
            "seed": self.seed,
            "embedder": self.embedder_name,
            "demo_builders": self._builder_refs(),
            "demo_variants": dict(self.demo_variants),
            "library": [d.to_dict() for d in self.library],
        }
        return state

    def load_state(self, state: dict[str, Any], *, allow_unsafe_lm_state: bool = False) -> DPPProgram:
        dpp_state = state.get(STATE_KEY) if isinstance(state, dict) else None
        if not isinstance(dpp_state, dict):
            raise ArtifactError(f"not a DPPProgram state: no {STATE_KEY!r} entry")
        if dpp_state.get("version") != STATE_VERSION:
            raise ArtifactError(f"unsupported DPPProgram state version {dpp_state.get('version')!r}")
        try:
            k = int(dpp_state["k"])
            mode = str(dpp_state["mode"])
            seed = int(dpp_state["seed"])
            embedder = str(dpp_state["embedder"])
            library = [HumanDemo.from_dict(d) for d in dpp_state["library"]]
            saved_builders = dict(dpp_state.get("demo_builders") or {})
            variants = {str(k): str(v) for k, v in dict(dpp_state.get("demo_variants") or {}).items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(f"corrupt DPPProgram state ({type(exc).__name__}: {exc})") from None
        except Exception as exc:  # DataError from a malformed demo
            raise ArtifactError(f"corrupt DPPProgram state: {exc}") from None
        if mode not in MODES:
            raise ArtifactError(f"corrupt DPPProgram state: unknown mode {mode!r}")
        builders = self._restore_builders(saved_builders)
        if self._embedder.value is not None:
            if embedder != self.embedder_name:
                logger.warning("saved state names embedder %s; using the embedder passed in (%s)",
                               embedder, self.embedder_name)
            embedder = self.embedder_name
        else:
            _check_embedder(embedder, mode)

        try:
            super().load_state(state, allow_unsafe_lm_state=allow_unsafe_lm_state)
        except KeyError as exc:
            raise ArtifactError(f"saved program state does not match this program: no parameter {exc}") from None

        self.k, self.mode, self.seed, self.library, self.demo_builders = k, mode, seed, library, builders
        self.demo_variants = variants
        self.embedder_name = embedder
        self._runtime = None
        self._ensure_runtime()
        return self

    def _restore_builders(self, saved: dict[str, str | None]) -> dict[str, DemoBuilder]:
        current = self._builder_refs()
        if saved == current:
            return dict(self.demo_builders)
        if not self._builders_default:
            logger.warning("demo builders differ from the saved ones (%s vs %s); using the ones passed in",
                           current, saved)
            return dict(self.demo_builders)
        out: dict[str, DemoBuilder] = {}
        for name, ref in saved.items():
            if ref is None:
                raise ArtifactError(f"the demo builder for predictor {name!r} was not importable when saved; "
                                    "pass demo_builders= to DPPProgram before load()")
            try:
                out[name] = _resolve_ref(ref)
            except Exception as exc:
                raise ArtifactError(f"cannot import demo builder {ref} for predictor {name!r}: {exc}") from None
        return out


# -- the uncompiled HumanIQ programs: the same selection at answer time, from the question's benchmark --------------
class BenchmarkDPPProgram(DPPProgram):
    """What ``--program humaniq`` (and ``static``, ``latefusion``) runs without a compile: HumanIQ's inference stage
    (HumanIQ §2-3).  For every question the human solution processes of the benchmark the program is given
    (``program.human_library``: ``compmix``, ``mintaka`` or ``qald``, read at call time, so a ``serve`` request's
    ``human_library`` option switches it) are selected exactly as a ``dpp-human`` compile selects them
    (:meth:`DPPProgram.select`: SBERT relevance × Levenshtein diversity of the action sequences, greedy MAP, ``k``
    processes; the question's own process never among them), and the final response generation gets that benchmark's
    merge few-shots, all of them but one whose question is the asked one.

    The library holds the processes of all three benchmarks (per variant the program's predictors draw from); a
    selection only ever considers the benchmark's own.  Built by :func:`human_processes`; it is not an artifact:
    ``hqa compile --optimizer dpp-human`` saves a program with one benchmark's library."""

    def __init__(self, program: dspy.Module, library: Sequence[HumanDemo], merge: dict[str, list], **options: Any):
        super().__init__(program, library, **options)
        self.merge_demos = {name: list(examples) for name, examples in merge.items()}
        self.merge_predictors = tuple(name for name, spec in program.human_demo_builders().items()
                                      if spec.variant == "merge")

    @property
    def benchmark(self) -> str:
        from hqa.data.human import DATASETS

        name = getattr(self.program, "human_library", None)
        if name not in DATASETS:
            raise ConfigError(f"human_library must be one of {', '.join(DATASETS)}, got {name!r}")
        return name

    def select(self, question: str, variant: str | None = None, dataset: str | None = None) -> list[HumanDemo]:
        return super().select(question, variant, self.benchmark if dataset is None else dataset)

    def _program_for(self, question: str) -> tuple[dspy.Module, list[str]]:
        """As :meth:`DPPProgram._program_for`, and the merge gets the benchmark's merge few-shots."""
        prog, ids = super()._program_for(question)
        own = question_key(question)
        examples = [ex for ex in self.merge_demos.get(self.benchmark, []) if question_key(ex.question) != own]
        predictors = dict(prog.named_predictors())
        for name in self.merge_predictors:
            if name in predictors:
                predictors[name].demos = list(examples)
        return prog, ids

    def dump_state(self, json_mode: bool = True) -> dict[str, Any]:
        raise ArtifactError("an uncompiled program's per-question selection is not saved: compile it with "
                            "hqa compile --optimizer dpp-human (one benchmark's library) to save one")


def selected_predictors(program: dspy.Module) -> tuple[dict[str, Any], dict[str, Any]]:
    """The predictors of ``program`` whose human demos are selected per question (every ``human_demo_builders()``
    entry but the merge's fixed few-shots), and the :class:`DPPProgram` options they make: ``demo_builders`` and
    ``demo_variants`` (None when every one draws complete processes)."""
    specs = {name: spec for name, spec in program.human_demo_builders().items() if spec.variant != "merge"}
    variants = {name: spec.variant for name, spec in specs.items()}
    return specs, {"demo_builders": {name: spec.build for name, spec in specs.items()},
                   "demo_variants": variants if set(variants.values()) != {"full"} else None}


def human_processes(program: dspy.Module) -> dspy.Module:
    """``program`` (a freshly built program that declares ``humaniq_processes``) as HumanIQ runs it without a
    compile: a :class:`BenchmarkDPPProgram` selecting ``program.shots`` processes per question with
    ``program.demos`` (``dpp`` — the paper's method, the default — or the ``relevance`` / ``diversity`` / ``random``
    ablations of HumanIQ RQ5; ``none``: zero-shot, no process in the prompt, the merge keeps its few-shots).

    The predictors and their libraries are the program's ``human_demo_builders()``: each variant (``full`` processes,
    the late-fusion ``wikipedia`` / ``wikidata`` halves) from all three benchmarks, a program's own library as it is;
    the merge few-shots of every benchmark."""
    from hqa.data.human import DATASETS, load_human_library, load_merge_examples
    from hqa.programs.base import DEMO_SELECTIONS

    mode = getattr(program, "demos", "dpp")
    if mode not in DEMO_SELECTIONS:
        raise ConfigError(f"demos must be one of {', '.join(DEMO_SELECTIONS)}, got {mode!r}")
    k = 0 if mode == "none" else int(getattr(program, "shots", 3))
    specs, selector = selected_predictors(program)
    library: list[HumanDemo] = []
    for variant in sorted({spec.variant for spec in specs.values() if spec.library is None}):
        library.extend(load_human_library(DATASETS, variant=variant))
    for spec in {id(s.library): s for s in specs.values() if s.library is not None}.values():
        library.extend(spec.library())
    return BenchmarkDPPProgram(program, library, {name: load_merge_examples(name) for name in DATASETS},
                               k=k, mode="dpp" if mode == "none" else mode, **selector)


__all__ = ["DPPProgram", "BenchmarkDPPProgram", "default_demo_builders", "human_processes", "selected_predictors"]
