"""One entry that opens a program: every command, ``hqa.load``, the HTTP server and the MLflow pyfunc go through
:func:`open_program`, the one place that builds a program's toolbox and configures DSPy (docs/architecture.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hqa.config import Settings
from hqa.errors import ConfigError


@dataclass
class OpenedProgram:
    """A program ready to answer, with what a caller needs to describe it."""

    program: Any
    label: str  # program name or artifact folder name
    kind: str  # the program's name (``simple``, ``humaniq``, ...)
    source: str  # "program" or the artifact path
    manifest: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    toolbox: Any = None  # the retrievers the program was given (None for a program that needs none)
    arguments: dict[str, Any] = field(default_factory=dict)  # what open_program added to its program_kwargs

    @property
    def version(self) -> str | None:
        """The artifact's identity: its creation time and program checksum prefix (None for a built program)."""
        if not self.manifest:
            return None
        sha = str(self.manifest.get("program_sha256", ""))[:12]
        return f"{self.manifest.get('created', '?')}/{sha}"

    def describe(self) -> dict[str, Any]:
        return {"label": self.label, "program": self.kind, "source": self.source, "version": self.version,
                "optimizer": self.manifest.get("optimizer"), "metrics": self.manifest.get("metrics", {}),
                "pack_version": self.manifest.get("pack_version"), "arguments": self.arguments,
                "warnings": self.warnings}


#: the compiled program shipped with hqa (scripts/compile-default builds it); used when no program is named
DEFAULT_PROGRAM_DIR = Path(__file__).resolve().parent / "data" / "default_program"


def default_program_dir() -> Path | None:
    """The shipped compiled default program, or None when this installation has none."""
    return DEFAULT_PROGRAM_DIR if (DEFAULT_PROGRAM_DIR / "program.json").is_file() else None


def configure_dspy(settings: Settings, lm=None):
    """Configure DSPy with the settings' LM and its adapter (:func:`hqa.lm.adapters.adapter_for`).  The embedded
    model and an OpenAI-compatible server get the JSON adapter: the signature's schema becomes a llama.cpp grammar
    in-process, and goes to a server in the spelling it applies (``lm.response_format``), so a 135M model still
    returns well-formed fields; OpenAI keeps the chat adapter (which itself falls back to JSON on a parse failure).
    Both refuse a JSON object or array where text was asked for (:mod:`hqa.lm.adapters`)."""
    import dspy

    from hqa.lm.adapters import adapter_for
    from hqa.lm.models import build_lm

    lm = lm or build_lm(settings)
    # LM replies are cached per project (artifacts/cache/dspy), so reruns of an evaluation cost no LM calls
    dspy.configure_cache(disk_cache_dir=str(settings.artifacts_dir / "cache" / "dspy"))
    dspy.configure(lm=lm, adapter=adapter_for(settings.lm))
    from hqa.io.logs import quiet_libraries

    quiet_libraries()  # DSPy installed its own log handler on import: the hqa command's policy applies to it
    return lm


def _toolbox_for(cls: Any, settings: Settings, given: Any):
    """The toolbox program class ``cls`` is given: ``given``, else one built from ``settings`` and checked; None for
    a program that needs none."""
    if not cls.needs_toolbox or given is not None:
        return given if cls.needs_toolbox else None
    from hqa.toolbox import Toolbox

    toolbox = Toolbox(settings)
    toolbox.check()
    return toolbox


def human_library_for(settings: Settings, benchmark: str | None) -> tuple[str, str | None]:
    """The HumanIQ library an uncompiled ``humaniq_processes`` program draws on (unless ``--program-kwargs`` names
    one), and a warning or None: the library of the dataset ``benchmark`` being evaluated (HumanIQ §3: one per
    benchmark); else — a free question, or a dataset without a library of its own — ``programs.human_library``."""
    from hqa.data.human import benchmark_library

    own = benchmark_library(benchmark) if benchmark else None
    if own:
        return own, None
    fallback = settings.programs.human_library
    if benchmark:
        return fallback, (f"{benchmark} has no HumanIQ library of its own; its questions get the {fallback} human "
                          "processes (programs.human_library)")
    return fallback, None


def open_program(settings: Settings, program: str | None = None, load: str | Path | None = None, *,
                 program_kwargs: dict[str, Any] | None = None, configure: bool = True,
                 check_lm: bool = True, toolbox: Any = None, benchmark: str | None = None,
                 student: bool = False) -> OpenedProgram:
    """Build (``program``) or load (``load``, a folder or an MLflow model URI) a program given its toolbox, check an
    OpenAI-compatible LM server answers, configure DSPy (unless ``configure=False``).  With neither, the shipped
    compiled default program (:func:`default_program_dir`), else the zero-shot ``simple`` program.

    A built program that declares ``humaniq_processes`` runs as its paper does without a compile
    (:func:`hqa.artifacts.dpp_program.human_processes`): human solution processes chosen per question from the
    library of ``benchmark`` (:func:`human_library_for`).  ``student=True`` builds a compile's student: without
    those processes (the optimizer chooses the demos).  ``toolbox``: default a :class:`~hqa.toolbox.Toolbox`."""
    from hqa.programs import build_program, canonical, program_class
    from hqa.programs.arguments import resolve_settings

    if program and load:
        raise ConfigError("give either a program name or a compiled program to load, not both")
    shipped = None
    if not program and not load and not program_kwargs:
        shipped = load = default_program_dir()
    if load:
        from hqa.artifacts.store import load_program, read_artifact_manifest, resolve_model_uri

        folder, label = str(load), Path(str(load)).name
        if folder.startswith(("models:/", "runs:/")):  # an MLflow (registered) model of a compiled program
            label = folder
            folder = str(resolve_model_uri(folder, settings))
        recorded = read_artifact_manifest(Path(folder))
        cls = program_class(recorded["program"])
        # settings -> arguments, once: the fields the manifest leaves unset (or ``auto``) that the settings decide
        tb, args = _toolbox_for(cls, settings, toolbox), resolve_settings(cls.Arguments, settings,
                                                                          recorded["program_kwargs"])
        prog, manifest = load_program(folder, settings, tb, args)
        opened = OpenedProgram(prog, label="default" if shipped else label, kind=manifest["program"],
                               source=str(load), manifest=manifest, warnings=list(manifest.get("warnings", [])),
                               toolbox=tb, arguments=args)
    else:
        name = canonical(program or "simple")
        cls = program_class(name)
        tb, args = _toolbox_for(cls, settings, toolbox), resolve_settings(cls.Arguments, settings, program_kwargs or {})
        warnings = []
        if cls.humaniq_processes and not student and not (program_kwargs or {}).get("human_library"):
            args["human_library"], warning = human_library_for(settings, benchmark)
            warnings += [warning] if warning else []
        prog = build_program(name, tb, **{**(program_kwargs or {}), **args})
        if cls.humaniq_processes and not student:
            from hqa.artifacts.dpp_program import human_processes

            prog = human_processes(prog)
        opened = OpenedProgram(prog, label=name, kind=name, source="program", toolbox=tb, arguments=args,
                               warnings=warnings)
    opened.warnings.extend(getattr(opened.toolbox, "warnings", None) or [])  # e.g. a remote KG down at start-up
    if check_lm and configure and settings.lm.provider == "openai_compatible":
        from hqa.lm.models import check_server

        check_server(settings.lm.api_base)
    if configure:
        lm = configure_dspy(settings)
        if check_lm and hasattr(getattr(lm, "engine", None), "response_format_in_use"):  # probed now, not in a question
            lm.engine.response_format_in_use()
    return opened


def _base(program: Any) -> Any:
    from hqa.lm.calls import answering_program

    return answering_program(program)


def _arguments(program: Any):
    """The arguments model of the program that answers (:mod:`hqa.programs.arguments`)."""
    from hqa.programs.arguments import Arguments

    return getattr(type(_base(program)), "Arguments", Arguments)


def runtime_options(program: Any) -> dict[str, tuple]:
    """The per-call options ``program`` takes — the fields of its arguments model marked ``runtime`` — as name ->
    (type, low, high) or (str, choices); {} when none.  ``human_library`` only for an uncompiled HumanIQ program (a
    compiled one keeps its own demos)."""
    from hqa.artifacts.dpp_program import BenchmarkDPPProgram
    from hqa.programs.arguments import option_spec

    model = _arguments(program)
    return {name: option_spec(model, name) for name in model.runtime_fields()
            if name != "human_library" or isinstance(program, BenchmarkDPPProgram)}


def with_options(program: Any, options: dict[str, Any] | None) -> Any:
    """``program`` itself without options; otherwise a copy (so concurrent requests never see each other's values)
    whose answering program has ``options`` applied: only the fields its arguments model marks ``runtime``, each
    checked by that model (ConfigError naming the option), ``auto`` resolved from its toolbox's settings now."""
    import copy

    from hqa.programs.arguments import ArgumentError, resolve_settings, validate

    if not options:
        return program
    if not isinstance(options, dict):
        raise ConfigError("options must be a JSON object of program options")
    model, allowed = _arguments(program), runtime_options(program)
    if "human_library" in options and "human_library" not in allowed and "human_library" in model.runtime_fields():
        raise ConfigError("option 'human_library' chooses the human processes of an uncompiled HumanIQ program; "
                          "this program is compiled and keeps its own demos")
    for name in options:
        if name not in allowed:
            names = ", ".join(sorted(allowed)) or "none"
            raise ConfigError(f"option {name!r} is not an option of program {type(_base(program)).__name__} "
                              f"(its options: {names})")
    try:
        values = validate(model, options, type(_base(program)).__name__)
    except ArgumentError as exc:
        raise ConfigError(f"option {exc.name!r} {exc.problem}") from None
    copied = copy.deepcopy(program)
    target = _base(copied)
    settings = getattr(getattr(target, "toolbox", None), "settings", None)
    if settings is not None:
        values.update(resolve_settings(model, settings, values))
    for name, value in values.items():
        setattr(target, name, value)
    return copied


def _warm_toolbox(opened: OpenedProgram) -> None:
    """Open the toolbox's store and indexes, load the embedder and the reranker, and — for a program whose LM
    writes SPARQL — warm the SPARQL guard's parser."""
    tb = opened.toolbox
    if tb is None:
        return
    from hqa.retrievers.embedding.encoders import get_embedder
    from hqa.retrievers.sparql.guard import prepare_query

    for part in ("sparql", "linker", "dense", "bm25", "reranker"):
        getattr(tb, part)
    get_embedder(tb.embedder_name)
    _ = tb.reranker.kind
    if getattr(type(_base(opened.program)), "writes_sparql", False):
        prepare_query("ASK { ?s ?p ?o }")


def warm_up(settings: Settings, opened: OpenedProgram) -> None:
    """Load what the first question would otherwise load lazily: the local LM, the toolbox's store and indexes."""
    _warm_toolbox(opened)
    if settings.lm.provider == "local":
        from hqa.lm.models import settings_engine

        settings_engine(settings)._model()


def prefetch(opened: OpenedProgram):
    """:func:`_warm_toolbox` in a background thread (returned): the toolbox loads while the program's first LM call
    runs (llama.cpp releases the GIL).  A failure is left for the program to meet (the part loads again on use)."""
    import threading

    def run() -> None:
        try:
            _warm_toolbox(opened)
        except Exception:  # noqa: BLE001 - the program reports the same failure when it needs the part
            pass

    thread = threading.Thread(target=run, name="hqa-prefetch", daemon=True)
    thread.start()
    return thread


__all__ = ["OpenedProgram", "open_program", "human_library_for", "configure_dspy", "runtime_options", "with_options", "warm_up", "prefetch"]
