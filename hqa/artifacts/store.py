"""Compiled-program artifacts: ``artifacts/programs/<name>/{program.json, manifest.json}``.

``program.json`` is DSPy's JSON state of the compiled program (demos, instructions; for a DPP-selected program also
the human library and selector config).  ``manifest.json`` says how to rebuild it: program name and constructor
arguments, the wrapper (``dpp``), the optimizer, the settings it was compiled with, knowledge-pack version, dspy
and hqa versions, metrics, data specs and hashes, the SHA-256 of ``program.json`` and its own SHA-256
(``manifest_sha256``, over every other field): a corrupt or edited file of either is refused, and so is a folder
missing either file.

Writes are atomic: both files go into a temp folder beside the destination, which then replaces it; an interrupted
save leaves the previous artifact (or none), never a partial one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from hqa.io.files import file_digest, replace_dir
from hqa.errors import ArtifactError

ARTIFACT_FORMAT = 1
_NAME_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def _versions() -> dict[str, str]:
    """The manifest's ``versions``: dspy, hqa and mlflow of :func:`hqa.tracking.record.versions` ("unknown" when missing)."""
    from hqa.tracking.record import versions

    found = versions()
    return {pkg: found.get(pkg) or "unknown" for pkg in ("dspy", "hqa", "mlflow")}


def _program_state(path: Path) -> Any:
    """The parsed program.json of an artifact folder; ArtifactError when it is corrupt."""
    try:
        return json.loads((path / "program.json").read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ArtifactError(f"{path / 'program.json'} is corrupt: {exc}") from None


def check_name(name: str) -> str:
    if not name or not set(name) <= _NAME_OK or name.startswith("."):
        raise ArtifactError(f"artifact name {name!r} may only use letters, digits, '-', '_' and '.'")
    return name


SELF_KEY = "hqa"  # program.json's reserved key: how the program was built, checked against an older manifest
_SELF_FIELDS = ("program", "program_kwargs", "wrapper", "settings")


def _describe(program_json: Path, manifest: dict[str, Any]) -> None:
    """Put the constructor configuration (and the models it was compiled with) into program.json itself, so the file
    is self-describing; the manifest keeps the provenance (data, metrics, versions, checksum)."""
    state = json.loads(program_json.read_text(encoding="utf-8"))
    state[SELF_KEY] = {k: manifest.get(k) for k in _SELF_FIELDS if k in manifest}
    program_json.write_text(json.dumps(state, indent=2, ensure_ascii=False, default=str), encoding="utf-8")


def save_artifact(program, dest: Path, manifest: dict[str, Any]) -> Path:
    """Save ``program`` and ``manifest`` into ``dest`` atomically; returns ``dest``."""
    staged = stage_artifact(program, dest, manifest)
    publish_artifact(staged, dest)
    return Path(dest)


def _not_written(dest: Path, exc: OSError) -> ArtifactError:
    return ArtifactError(f"cannot write compiled program to {dest}: {exc.strerror or exc} (nothing was changed there)")


def publish_artifact(staged: Path, dest: Path) -> None:
    """Put the folder :func:`stage_artifact` wrote at ``dest`` in one rename (:func:`hqa.io.files.replace_dir`: a
    program already there is put back if this fails or is interrupted); the staged folder is gone either way."""
    dest = Path(dest)
    try:
        replace_dir(Path(staged), dest)
    except OSError as exc:
        raise _not_written(dest, exc) from None
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def stage_artifact(program, dest: Path, manifest: dict[str, Any]) -> Path:
    """``program`` and ``manifest`` written, checksummed, into a new hidden folder beside ``dest`` (returned), for
    :func:`publish_artifact` to put in place; ``dest`` is not touched.  The folder is removed if writing fails."""
    dest = Path(dest)
    check_name(dest.name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        try:
            program.save(str(tmp / "program.json"))
        except RuntimeError as exc:  # DSPy wraps every error while writing, a full disk included
            if isinstance(exc.__context__, OSError):
                raise exc.__context__ from None
            raise
        _describe(tmp / "program.json", manifest)
        full = {
            "format": ARTIFACT_FORMAT,
            "name": dest.name,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "versions": _versions(),
            **{k: v for k, v in manifest.items() if k != MANIFEST_SUM},
            "program_sha256": file_digest(tmp / "program.json"),
        }
        full = json.loads(json.dumps(full, default=str))  # the checksum is over what is written
        full[MANIFEST_SUM] = manifest_checksum(full)
        with open(tmp / "manifest.json", "w", encoding="utf-8") as fh:
            json.dump(full, fh, indent=2, default=str)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise _not_written(dest, exc) from None
        raise
    return tmp


MANIFEST_SUM = "manifest_sha256"  # the manifest's own checksum: every other field, canonical JSON


def manifest_checksum(manifest: dict[str, Any]) -> str:
    """SHA-256 of the manifest without its own checksum field, as canonical JSON (sorted keys, no spaces)."""
    body = {k: v for k, v in manifest.items() if k != MANIFEST_SUM}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                     default=str).encode("utf-8")).hexdigest()


def _check_manifest_sum(path: Path, manifest: dict[str, Any]) -> None:
    """The manifest is what it was saved as: its ``manifest_sha256`` (checked by :func:`read_artifact_manifest` as
    read); a manifest of an earlier hqa (no such field) must agree with the self-description inside program.json
    (itself covered by ``program_sha256``) on everything that shapes the program: its name, constructor arguments,
    wrapper and recorded settings."""
    where = path / "manifest.json"
    if manifest.get(MANIFEST_SUM) is not None:
        return  # checked by read_artifact_manifest
    state = _program_state(path)
    desc = state.get(SELF_KEY) if isinstance(state, dict) else None
    if not isinstance(desc, dict):
        return  # saved before program.json described itself: program_sha256 is all there is
    desc = migrate_manifest({**desc, "program_kwargs": desc.get("program_kwargs", {})})
    for key in _SELF_FIELDS:
        if key in desc and desc.get(key) != manifest.get(key):
            raise ArtifactError(f"{where}: field {key!r} differs from what {path / 'program.json'} records "
                                "(edited after saving); recompile, or restore the file")


def check_program_kwargs(program: Any, kwargs: Any, where: str) -> dict[str, Any]:
    """``kwargs`` if its program's arguments model (:mod:`hqa.programs.arguments`) takes them — known names (not one
    the program's CLI name fixes, e.g. ``cot``), the field's type and bounds.  ArtifactError naming the field
    otherwise (``program_kwargs.<name>``)."""
    from hqa.programs import PROGRAMS, canonical, program_class
    from hqa.programs.arguments import ArgumentError, validate

    if not isinstance(program, str) or canonical(program) not in PROGRAMS:
        raise ArtifactError(f"{where}: field 'program' must be one of {', '.join(PROGRAMS)}, got {program!r}")
    if not isinstance(kwargs, dict):
        raise ArtifactError(f"{where}: field 'program_kwargs' must be an object, got {type(kwargs).__name__}")
    cls = program_class(program)
    fixed = cls.fixed_kwargs.get(canonical(program), {})
    known = [n for n in cls.Arguments.model_fields if n not in fixed]
    if unknown := [name for name in kwargs if name not in known]:
        raise ArtifactError(f"{where}: unknown field 'program_kwargs.{unknown[0]}' for program {program!r} "
                            f"(known: {', '.join(known) or 'none'})")
    try:
        validate(cls.Arguments, kwargs, program)
    except ArgumentError as exc:
        raise ArtifactError(f"{where}: field 'program_kwargs.{exc.name}' {exc.problem}") from None
    return kwargs


def check_program_state(state: Any, program, where: str, max_demos: int) -> None:
    """``state`` (program.json) must belong to ``program``: exactly its predictors, each with at most ``max_demos``
    demos.  ArtifactError naming the field otherwise (another program's state, a huge demo list)."""
    if not isinstance(state, dict):
        raise ArtifactError(f"{where}: must be a JSON object, got {type(state).__name__}")
    expected = {name for name, _ in program.named_predictors()}
    have = {k for k in state if k not in ("metadata", "dpp", SELF_KEY)}
    if have != expected:
        missing, unknown = sorted(expected - have), sorted(have - expected)
        detail = (f"unknown field {unknown[0]!r}" if unknown else f"missing field {missing[0]!r}")
        raise ArtifactError(f"{where} does not fit program {type(program).__name__}: {detail} "
                            f"(its predictors: {', '.join(sorted(expected))})")
    for name in sorted(have):
        entry = state[name]
        if not isinstance(entry, dict):
            raise ArtifactError(f"{where}: field {name!r} must be an object, got {type(entry).__name__}")
        demos = entry.get("demos", [])
        if not isinstance(demos, list):
            raise ArtifactError(f"{where}: field '{name}.demos' must be a list, got {type(demos).__name__}")
        if len(demos) > max_demos:
            raise ArtifactError(f"{where}: field '{name}.demos' has {len(demos)} demos; at most {max_demos} are "
                                "allowed (setting lm.max_demos)")
    library = (state.get("dpp") or {}).get("library") if isinstance(state.get("dpp"), dict) else None
    if isinstance(library, list) and len(library) > max_demos * 1000:
        raise ArtifactError(f"{where}: field 'dpp.library' has {len(library)} demos; at most {max_demos * 1000}")


def read_artifact_manifest(path: Path) -> dict[str, Any]:
    """The manifest of an artifact folder, verified against its program file."""
    path = Path(path)
    if not path.is_dir():
        raise ArtifactError(f"no compiled program at {path} (expected a folder with program.json and manifest.json)")
    for name in ("program.json", "manifest.json"):
        if not (path / name).is_file():
            raise ArtifactError(f"compiled program at {path} is incomplete: {name} is missing (a compiled program "
                                "loads only with its checksummed manifest; recompile it, or restore the file)")
    try:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{path / 'manifest.json'} is corrupt: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != ARTIFACT_FORMAT:
        raise ArtifactError(f"{path / 'manifest.json'} has an unknown format {manifest.get('format') if isinstance(manifest, dict) else '?'}"
                            f" (this hqa reads format {ARTIFACT_FORMAT})")
    # judged as read (before migration); refused after the field checks, which name what is wrong more precisely
    sum_ok = manifest.get(MANIFEST_SUM) is None or manifest[MANIFEST_SUM] == manifest_checksum(manifest)
    where = str(path / "manifest.json")
    from hqa.schemas.records import manifest_problem

    problem = manifest_problem(manifest)  # hqa.schemas.records.ArtifactManifest: types, unknown fields
    if problem:
        raise ArtifactError(f"{where}: {problem}")
    migrate_manifest(manifest)
    check_program_kwargs(manifest["program"], manifest["program_kwargs"], where)
    if file_digest(path / "program.json") != manifest["program_sha256"]:
        raise ArtifactError(f"{path / 'program.json'} does not match its manifest checksum (corrupt or edited)")
    if not sum_ok:
        raise ArtifactError(f"{where} does not match its checksum (manifest_sha256: corrupt or edited; a compiled "
                            "program's manifest shapes what runs, so it is not loaded): recompile, or restore the file")
    _check_manifest_sum(path, manifest)
    return manifest


def dspy_mismatch(manifest: dict[str, Any]) -> str | None:
    """``"compiled with dspy A; this installation has dspy B"`` when the major.minor versions differ, else None.

    DSPy's own policy for saved programs (``Module.load``): another version warns and loads.  hqa does the same
    for another minor version when the state validates against the program (:func:`load_program`: one warning), and
    refuses with one line naming both versions when it does not, or when the major version differs."""
    compiled_with = str(manifest.get("versions", {}).get("dspy", ""))
    current = _versions()["dspy"]
    if not compiled_with or compiled_with.split(".")[:2] == current.split(".")[:2]:
        return None
    return f"compiled with dspy {compiled_with}; this installation has dspy {current}"


def model_warnings(manifest: dict[str, Any], settings) -> list[str]:
    """One line per model that differs between the compiled program's recorded settings and the current ones."""
    recorded, now, out = manifest.get("settings") or {}, settings.as_dict(), []
    for section, keys, what in (("lm", ("provider", "model"), "LM"), ("models", ("embedder",), "embedder"),
                                ("models", ("reranker",), "reranker")):
        old = recorded.get(section)
        if not isinstance(old, dict):
            continue
        was = ":".join(_model_value(section, k, old.get(k, "")) for k in keys)
        cur = ":".join(_model_value(section, k, now[section].get(k, "")) for k in keys)
        if was != cur:
            out.append(f"compiled with {what} {was!r}, running with {cur!r}: demos and instructions were chosen "
                       "for the other one")
    return out


def _model_value(section: str, key: str, value: Any) -> str:
    """A recorded setting as the model it selects (``models.reranker = auto`` is the cross-encoder it tries)."""
    if (section, key) == ("models", "reranker"):
        from hqa.config import reranker_model

        return str(reranker_model(str(value or "")) or "")
    return str(value)


# predictor names of earlier versions → today's (the agent/static/late-fusion ending became one SourceMerge module)
_RENAMED_PREDICTORS = {"parametric": "sources.parametric", "merge": "sources.merge"}


# predictors added since (name or ``.name`` suffix): a program.json saved before has none, so they start empty
_ADDED_PREDICTORS = ("sources.choose",)


def migrate_state(state: Any, program) -> Any:
    """A program.json saved before a predictor was renamed, with its entries under today's names (only where the
    program has the new name and the file only the old one); a predictor added since starts as the program's own
    (no demos)."""
    if not isinstance(state, dict):
        return state
    predictors = dict(program.named_predictors())
    expected = set(predictors)
    out = dict(state)
    if any(k in expected for k in out):  # a state of this program, saved before the additions
        for name in expected - set(out):
            if any(name == added or name.endswith("." + added) for added in _ADDED_PREDICTORS):
                out[name] = predictors[name].dump_state()
    for key in list(out):
        for old, new in _RENAMED_PREDICTORS.items():
            renamed, target = key == old or key.endswith("." + old), key[: -len(old)] + new
            if renamed and key not in expected and target in expected and target not in out:
                out[target] = out.pop(key)
                break
    return out


def migrate_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    """A manifest of an earlier hqa in today's terms: the program renamed ``hqa`` → ``humaniq``; the toolbox *name*
    programs were once built with dropped (a program is now given its toolbox when it is opened)."""
    from hqa.programs import ALIASES

    if isinstance(manifest.get("program"), str):
        manifest["program"] = ALIASES.get(manifest["program"], manifest["program"])
    kwargs = manifest.get("program_kwargs")
    if isinstance(kwargs, dict) and isinstance(kwargs.get("toolbox"), str):
        manifest["program_kwargs"] = {k: v for k, v in kwargs.items() if k != "toolbox"}
    return manifest


def build_from_manifest(manifest: dict[str, Any], toolbox=None, arguments: dict[str, Any] | None = None):
    """An uncompiled program of the manifest's class and configuration (and ``arguments`` it leaves unset), given
    ``toolbox`` (the state is loaded by the caller)."""
    from hqa.programs import build_program

    program = build_program(manifest["program"], toolbox, **{**manifest.get("program_kwargs", {}), **(arguments or {})})
    wrapper = manifest.get("wrapper")
    if wrapper == "dpp":
        from hqa.artifacts.dpp_program import DPPProgram

        program = DPPProgram(program)
    elif wrapper:
        raise ArtifactError(f"unknown program wrapper {wrapper!r} in manifest")
    return program


def load_program(path: Path | str, settings=None, toolbox=None, arguments: dict[str, Any] | None = None):
    """Rebuild a compiled program from an artifact folder, given ``toolbox`` (its retrievers) and the constructor
    ``arguments`` its manifest leaves unset (see :func:`hqa.app.open_program`, which resolves both from settings).

    Returns ``(program, manifest)``.  The LM is whatever the current settings configure; a model that differs from
    the recorded one is reported in ``manifest["warnings"]``.
    """
    from hqa.config import load_settings

    path = Path(path)
    manifest = read_artifact_manifest(path)
    settings = settings or load_settings()
    try:
        program = build_from_manifest(manifest, toolbox, arguments)
    except (TypeError, ValueError) as exc:
        raise ArtifactError(f"{path / 'manifest.json'}: field 'program_kwargs' does not fit program "
                            f"{manifest['program']!r}: {exc}") from None
    state = migrate_state(_program_state(path), program)
    mismatch = dspy_mismatch(manifest)
    compiled_major = str(manifest.get("versions", {}).get("dspy", "")).split(".")[0]
    if mismatch and compiled_major != _versions()["dspy"].split(".")[0]:  # a major version changes the state format
        raise ArtifactError(f"{path}: {mismatch}; a program from another DSPy major version is not loaded "
                            "(recompile it with this dspy)")
    try:
        check_program_state(state, program, str(path / "program.json"), settings.lm.max_demos)
        try:
            program.load_state(state)
        except ArtifactError:
            raise
        except Exception as exc:  # noqa: BLE001 - DSPy raises assorted errors on a mismatched state
            raise ArtifactError(f"{path / 'program.json'} does not fit program {manifest['program']!r}: "
                                f"{type(exc).__name__}: {_first_line(exc)}") from None
    except ArtifactError as exc:
        if mismatch:
            raise ArtifactError(f"{_first_line(exc)} ({mismatch})") from None
        raise
    warnings = model_warnings(manifest, settings)
    if mismatch:
        warnings.append(f"{mismatch}: its state fits program {manifest['program']!r} and was loaded "
                        "(recompile with this dspy to be sure it behaves the same)")
    want = manifest.get("pack_version")
    if want and toolbox is not None and settings.kg.kind == "oxigraph":
        have = toolbox.manifest.get("version")
        if have != want:
            warnings.append(f"compiled against knowledge pack {want}, running on {have}")
    manifest["warnings"] = warnings
    return program, manifest


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def list_artifacts(root: Path) -> list[dict[str, Any]]:
    out = []
    for d in sorted(Path(root).glob("*")):
        if d.is_dir() and not d.name.startswith(".") and (d / "manifest.json").exists():
            try:
                out.append(json.loads((d / "manifest.json").read_text(encoding="utf-8")))
            except (json.JSONDecodeError, UnicodeDecodeError):
                out.append({"name": d.name, "error": "corrupt manifest"})
    return out


def resolve_model_uri(uri: str, settings) -> Path:
    """``models:/NAME/VERSION`` (or ``runs:/...``) → a local artifact folder with program.json + manifest.json."""
    import mlflow

    mlflow.set_tracking_uri(settings.tracking_uri)
    try:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri.rstrip("/")))
    except Exception as exc:  # noqa: BLE001 - MLflow raises several types for a missing name/version
        raise ArtifactError(f"cannot fetch MLflow model {uri} from {settings.tracking_uri}: "
                            f"{_first_line(exc)[:200]}") from None
    folder = local / "artifacts" / "program"
    try:
        import yaml

        spec = yaml.safe_load((local / "MLmodel").read_text(encoding="utf-8"))
        folder = local / spec["flavors"]["python_function"]["artifacts"]["program"]["path"]
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        pass
    if not (folder / "manifest.json").is_file():
        raise ArtifactError(f"MLflow model {uri} is not an hqa program model (no artifacts/program/manifest.json)")
    return folder
