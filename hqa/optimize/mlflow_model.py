"""The MLflow model of a compiled program, as an MLflow *models-from-code* pyfunc.

Nothing is pickled: the model is this file (the code), the artifact folder (``program.json`` + ``manifest.json``) as
an MLflow artifact, and a ``model_config`` holding only the artifacts directory the program was compiled against
(the "world": knowledge pack and indexes) and an empty ``settings`` table — no LM settings, no keys.  Loading runs
:func:`hqa.app.open_program` on the artifact folder, exactly as ``hqa ask --load`` does (:mod:`hqa.pyfunc`), with the
LM of the loading process's settings, over which a loader's ``model_config={"settings": {...}}`` is laid (a Spark
executor's LM: ``mlflow.pyfunc.spark_udf(..., model_config=...)``, docs/serving.md).

``predict`` takes a DataFrame with a ``question`` column (or a dict / list of questions) and returns one row per
question: ``question``, ``answer`` and ``trace`` (JSON text); its ``params`` are the program's runtime options
(the ``runtime`` fields of its arguments model, e.g. ``k``), declared in the model signature with the compiled values as
defaults.

So that a fresh environment can install the model (``mlflow models serve --env-manager virtualenv``), hqa travels
with it as ``code_paths``, with its runtime dependencies pinned (:func:`requirements`) and an input example that is
stored, never run (:func:`log_model`); docs/serving.md ("MLflow model and registry") has the details.
"""

from __future__ import annotations

from pathlib import Path

import mlflow

CODE_PATH = Path(__file__).resolve().parent.parent / "pyfunc.py"
HQA_PACKAGE = Path(__file__).resolve().parent.parent
INPUT_EXAMPLE = {"question": ["Who is the author of Animal Farm?"]}
_PARAM_TYPES = {int: "long", float: "double", str: "string", bool: "boolean"}


def requirements() -> list[str]:
    """hqa's runtime dependencies (its distribution metadata, extras left out) pinned ``==`` to the installed
    versions, plus mlflow and dspy; a dependency not installed here keeps hqa's own range."""
    from importlib import metadata

    from packaging.requirements import Requirement

    try:
        declared = [Requirement(r) for r in metadata.requires("hqa") or []]
    except metadata.PackageNotFoundError:  # hqa run from a checkout without being installed
        declared = [Requirement("mlflow"), Requirement("dspy")]
    pins: dict[str, str] = {}
    for req in declared:
        if req.marker is not None and "extra" in str(req.marker):
            continue
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        try:
            pins[req.name] = f"{req.name}{extras}=={metadata.version(req.name)}"
        except metadata.PackageNotFoundError:
            pins[req.name] = str(req)
    for name in ("mlflow", "dspy"):
        pins.setdefault(name, f"{name}=={metadata.version(name)}")
    return list(pins.values())


def param_schema(artifact_dir: Path):
    """The program's runtime options as an MLflow ParamSchema, defaults as compiled; None when it has none."""
    from mlflow.types import ParamSchema, ParamSpec

    from hqa.app import _base, runtime_options
    from hqa.artifacts.store import build_from_manifest, read_artifact_manifest

    program = build_from_manifest(read_artifact_manifest(Path(artifact_dir)))
    specs = [ParamSpec(name, _PARAM_TYPES[spec[0]], getattr(_base(program), name))
             for name, spec in sorted(runtime_options(program).items()) if spec[0] in _PARAM_TYPES]
    return ParamSchema(specs) if specs else None


def log_model(artifact_dir: Path, settings, *, name: str = "model", register: str | None = None,
              program_name: str | None = None):
    """Log the compiled program at ``artifact_dir`` as a models-from-code pyfunc; optionally register it.
    ``program_name``: the program's name under ``artifacts/programs`` (default: the folder's)."""
    from mlflow.models import Model, ModelSignature
    from mlflow.pyfunc import _get_pyfunc_model_flavor_name
    from mlflow.types import ColSpec, Schema

    artifact_dir = Path(artifact_dir)
    signature = ModelSignature(inputs=Schema([ColSpec("string", "question")]),
                               outputs=Schema([ColSpec("string", "question"), ColSpec("string", "answer"),
                                               ColSpec("string", "trace")]),
                               params=param_schema(artifact_dir))
    # mlflow.pyfunc.log_model, minus the serving check: with an input example, MLflow loads the model and answers
    # the example question to validate it (1-2 minutes of LM and tool calls for an agent), which no one asked for;
    # the signature is declared above, so nothing needs inferring from a prediction either
    return Model.log(
        artifact_path=None, name=name, flavor=_PyfuncFlavor, python_model=str(CODE_PATH), artifacts={"program": str(artifact_dir)},
        # "settings": empty; a loader may fill it (hqa.pyfunc.settings_overrides: MLflow lets a loader override only
        # the keys logged here), e.g. the LM of a Spark executor
        model_config={"name": program_name or artifact_dir.name,
                      "artifacts_dir": str(Path(settings.artifacts_dir).resolve()), "settings": {}},
        signature=signature, registered_model_name=register, pip_requirements=requirements(),
        code_paths=[str(HQA_PACKAGE)], input_example=INPUT_EXAMPLE, validate_serving_input=False,
        flavor_name=_get_pyfunc_model_flavor_name(str(CODE_PATH)),
    )


class _PyfuncFlavor:
    """``mlflow.pyfunc`` as :meth:`mlflow.models.Model.log`'s flavor, taking the ``validate_serving_input`` switch
    that ``Model.log`` reads from its keyword arguments (and then hands on to the flavor's ``save_model``, which
    ``mlflow.pyfunc.log_model`` does not let through); tests/unit/tracking/test_run_record.py checks the example is stored and
    never run."""

    __name__ = "mlflow.pyfunc"

    @staticmethod
    def save_model(validate_serving_input: bool = True, **kwargs):
        return mlflow.pyfunc.save_model(**kwargs)


def log_program(artifact_dir: Path, settings, register: str | None = None, name: str | None = None) -> str | None:
    """Log the compiled program's JSON + manifest, and the program as an MLflow models-from-code pyfunc
    (nothing pickled), registered as ``register`` when given; ``name``: the program's name under
    ``artifacts/programs`` when ``artifact_dir`` is a staged folder that is not in place yet.

    Returns a note when the model could not be logged, else None.
    """
    mlflow.log_artifacts(str(artifact_dir), artifact_path="program")
    try:
        info = log_model(Path(artifact_dir), settings, register=register, program_name=name)
    except Exception as exc:  # noqa: BLE001 - the JSON artifact above is the source of truth
        if register:
            raise
        note = f"log_model skipped: {type(exc).__name__}: {str(exc)[:200]}"
        mlflow.set_tag("log_model", note)
        return note
    mlflow.set_tag("model_uri", info.model_uri)
    if register and getattr(info, "registered_model_version", None):
        mlflow.set_tag("registered_model", f"models:/{register}/{info.registered_model_version}")
    return None
