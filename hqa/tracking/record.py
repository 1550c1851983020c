"""What a run actually ran with, recorded the same way by every job (``hqa compile``, ``hqa evaluate``,
``hqa compare``): the compiled program's ``manifest.json`` keeps it under ``record``, the MLflow run has it as
``record.*`` parameters and ``hqa.*`` tags, and ``hqa runs`` shows it from there.  :func:`run_record` gathers the
parts in use, the LM, the git state, library versions, seeds, datasets and demos (one function each below).

Nothing here imports mlflow or loads a model the run would not load anyway (the reranker kind is resolved the way
the first rerank resolves it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from hqa.lm.models import SMOLLM2_GGUF
from hqa.retrievers.rerank import load_failure
from hqa.tracking.runs import flat_params
from hqa.version import __version__

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def git_state(root: Path = REPO_ROOT) -> dict[str, Any]:
    """``{"commit": sha, "dirty": bool}`` of the checkout hqa runs from; both None when hqa is not run from a git
    checkout (an installed wheel) or git is not installed."""
    if not (root / ".git").exists():
        return {"commit": None, "dirty": None}
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=30, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit or None, "dirty": bool(status.strip())}


def versions() -> dict[str, str | None]:
    """Installed versions of hqa and the libraries that decide its prompts and records."""
    out: dict[str, str | None] = {"hqa": __version__, "python": platform.python_version()}
    for name in ("dspy", "mlflow", "litellm", "llama_cpp_python"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def lm_record(settings: Any) -> dict[str, Any]:
    """The LM a run answers with: provider, model, quantisation (the GGUF's, read from its file name; None for a
    remote model, whose serving precision hqa cannot see), the DSPy adapter, sampling settings and seed."""
    cfg = settings.lm
    model, quantisation = cfg.model or None, None
    if cfg.provider == "local":
        model = Path(cfg.model).name if cfg.model else SMOLLM2_GGUF
        stem = Path(model).stem
        quantisation = stem.rsplit(".", 1)[1] if "." in stem else None  # SmolLM2-135M-Instruct.Q4_1 -> Q4_1
    adapter = None
    with contextlib.suppress(Exception):  # the record names what it can see
        import dspy

        adapter = type(dspy.settings.adapter).__name__ if dspy.settings.adapter is not None else None
    if adapter is None:  # what hqa.app.configure_dspy sets
        from hqa.lm.adapters import adapter_for

        adapter = type(adapter_for(cfg)).__name__
    return {"provider": cfg.provider, "model": model, "quantisation": quantisation, "adapter": adapter,
            "api_base": cfg.api_base or None, "temperature": cfg.temperature, "max_tokens": cfg.max_tokens,
            "seed": cfg.seed, "response_format": response_format_record(settings)}


def response_format_record(settings: Any) -> str | None:
    """How a structured-output request reaches the LM: ``grammar`` for the embedded engine (llama.cpp), the
    spelling an OpenAI-compatible server gets and how it was chosen (``json_object_schema (probe: …)``), None for
    OpenAI (DSPy's own)."""
    cfg = settings.lm
    if cfg.provider == "local":
        return "grammar (llama.cpp, in-process)"
    if cfg.provider != "openai_compatible":
        return None
    import dspy

    engine = getattr(dspy.settings.lm, "engine", None) if dspy.settings.lm is not None else None
    if not hasattr(engine, "response_format_in_use"):
        return cfg.response_format
    try:
        used = engine.response_format_in_use()
    except Exception as exc:  # noqa: BLE001 - the record says the probe failed rather than failing the run
        return f"{cfg.response_format} (probe failed: {type(exc).__name__})"
    return f"{used.mode} ({used.how}" + (f": {used.detail})" if used.detail else ")")


def parts_record(toolbox: Any, settings: Any) -> dict[str, Any]:
    """Per retrieval part, what is in use (None for a program without a toolbox): the reranker's kind and model
    (``bi-encoder`` when the cross-encoder could not be loaded), the embedder, the dense index's kind and the model
    its passages were embedded with, the SPARQL backend, the text and linker sources, and the world (name, version)
    the local parts come from."""
    if toolbox is None:
        return {}
    s, reranker = toolbox.settings, toolbox.reranker
    kind = reranker.kind  # resolves the cross-encoder (or its fallback) as the first rerank would
    out: dict[str, Any] = {
        "reranker": kind,
        "reranker_model": reranker.model_name if kind == "cross-encoder" else (toolbox.embedder_name or "minilm"),
        "reranker_configured": s.models.reranker or None,
        "reranker_fallback": (f"cross-encoder {reranker.model_name} not loadable: {load_failure(reranker.model_name)}"
                              if kind == "bi-encoder" and load_failure(reranker.model_name) else None),
        "embedder": toolbox.embedder_name or "minilm",
        "sparql": s.kg.kind + (f" {s.kg.endpoint}" if s.kg.kind == "sparql" else ""), "text": s.text.kind,
        "linker": s.linker.kind}
    try:
        out["dense"] = type(toolbox.dense).__name__
        # the model the pack's or a corpus's stored passage vectors came from (models.passage_embedder)
        out["passage_embedder"] = getattr(toolbox.dense, "passage_key", None)
    except Exception as exc:  # noqa: BLE001 - a part that cannot open is recorded as such
        out["dense"] = f"unavailable: {type(exc).__name__}"
    # how many of the world's texts have vectors stored at set-up (0: every text is embedded at question time)
    stored = getattr(toolbox.vector_memo, "stored", None)
    out["stored_vectors"] = len(stored) if stored is not None else 0
    world = getattr(toolbox, "configured_world", None)
    if world is not None:
        out["world"] = str(getattr(world, "name", "") or world.path)
        out["world_version"] = (world.manifest or {}).get("version")
    else:
        out["world"] = "pack"
        try:
            out["world_version"] = toolbox.manifest.get("version")
        except Exception:  # noqa: BLE001 - no pack built: said so, not hidden
            out["world_version"] = None
    return out


def dataset_checksum(examples: list) -> str:
    """A checksum of the questions, gold answers and ids of ``examples`` (order matters), 16 hex digits."""
    h = hashlib.sha256()
    for ex in examples:
        h.update(json.dumps({"id": ex.get("id"), "q": ex.question, "a": list(ex.get("answers") or [])},
                            sort_keys=True).encode())
    return h.hexdigest()[:16]


def dataset_record(spec: str, examples: list) -> dict[str, Any]:
    """A dataset spec (``compmix/dev``, ``humaniq-compmix``, ``file.jsonl``) as name, split, size and checksum."""
    name, _, split = str(spec).partition("/")
    return {"spec": spec, "name": name, "split": split or None, "n": len(examples),
            "sha256": dataset_checksum(examples)}


def program_demos(program: Any) -> dict[str, Any]:
    """Per predictor (by name), the ids of the demos it holds as compiled; a per-question selector (a DPP wrapper)
    adds ``per_question`` (mode, k, library size): its demos are chosen per question and named in each row."""
    from hqa.lm.calls import demo_id, name_predictors

    named = getattr(program, "named_predictors", None)
    out: dict[str, Any] = {}
    if callable(named):
        names = name_predictors(program)
        for name, predictor in named():
            out[names.get(id(predictor), name)] = [demo_id(d) for d in predictor.demos]
    library = getattr(program, "library", None)
    if library is not None and hasattr(program, "mode"):
        out["per_question"] = {"mode": program.mode, "k": program.k, "library": len(library),
                               "predictors": sorted(program.demo_builders)}
    return out


def run_record(settings: Any, *, program: Any = None, toolbox: Any = None, seeds: dict[str, Any] | None = None,
               datasets: dict[str, tuple[str, list]] | None = None) -> dict[str, Any]:
    """Everything a run ran with (see the module docstring).  ``datasets``: role -> (spec, examples)."""
    record: dict[str, Any] = {"git": git_state(), "versions": versions(), "lm": lm_record(settings),
                              "parts": parts_record(toolbox, settings),
                              "seeds": {"lm": settings.lm.seed, **(seeds or {})}}
    record["datasets"] = {role: dataset_record(spec, examples) for role, (spec, examples) in (datasets or {}).items()}
    if program is not None:
        record["demos"] = program_demos(program)
    return record


def record_params(record: dict[str, Any]) -> dict[str, str]:
    """The record as flat MLflow parameters (``record.parts.reranker`` = ``bi-encoder``, …); the demo lists are
    left to the manifest and rows (a parameter holds 6000 characters at most)."""
    return flat_params("record", {k: v for k, v in record.items() if k != "demos"}, none="")


def record_tags(record: dict[str, Any]) -> dict[str, str]:
    """The few record fields a run list shows, as MLflow tags (``hqa.git_commit``, ``hqa.reranker``, …)."""
    git, parts, lm = record.get("git") or {}, record.get("parts") or {}, record.get("lm") or {}
    quantisation = f" {lm['quantisation']}" if lm.get("quantisation") else ""
    return {"hqa.git_commit": str(git.get("commit") or "unknown") + ("+dirty" if git.get("dirty") else ""),
            "hqa.lm": f"{lm.get('provider')}:{lm.get('model')}{quantisation}",
            "hqa.reranker": str(parts.get("reranker") or "none")}


def log_record(record: dict[str, Any]) -> None:
    """The record as the active MLflow run's parameters and tags, and as ``record.json`` beside its artifacts."""
    import mlflow

    mlflow.log_params(record_params(record))
    mlflow.set_tags(record_tags(record))
    mlflow.log_dict(record, "record.json")


__all__ = ["dataset_checksum", "dataset_record", "git_state", "log_record", "lm_record", "parts_record",
           "program_demos", "record_params", "record_tags", "run_record", "versions"]
