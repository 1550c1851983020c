"""The MLflow model of a compiled program, as an MLflow *models-from-code* pyfunc.

Nothing is pickled: the model is this file (the code), the artifact folder (``program.json`` + ``manifest.json``) as
an MLflow artifact, and a ``model_config`` holding only the artifacts directory the program was compiled against
(the "world": knowledge pack and indexes) — no LM settings, no keys.  Loading runs :func:`hqa.app.open_program` on
the artifact folder, exactly as ``hqa ask --load`` does, with the LM of the loading process's settings.

``predict`` takes a DataFrame with a ``question`` column (or a dict / list of questions) and returns one row per
question: ``question``, ``answer`` and ``trace`` (JSON text).
"""

from __future__ import annotations

from pathlib import Path

import mlflow

CODE_PATH = Path(__file__).resolve().parent / "mlflow_pyfunc.py"


def log_model(artifact_dir: Path, settings, *, name: str = "model", register: str | None = None):
    """Log the compiled program at ``artifact_dir`` as a models-from-code pyfunc; optionally register it."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    artifact_dir = Path(artifact_dir)
    signature = ModelSignature(inputs=Schema([ColSpec("string", "question")]),
                               outputs=Schema([ColSpec("string", "question"), ColSpec("string", "answer"),
                                               ColSpec("string", "trace")]))
    return mlflow.pyfunc.log_model(
        name=name, python_model=str(CODE_PATH), artifacts={"program": str(artifact_dir)},
        model_config={"name": artifact_dir.name, "artifacts_dir": str(Path(settings.artifacts_dir).resolve())},
        signature=signature, registered_model_name=register, pip_requirements=["mlflow", "dspy"],
    )


def resolve_model_uri(uri: str, settings) -> Path:
    """``models:/NAME/VERSION`` (or ``runs:/...``) → a local artifact folder with program.json + manifest.json."""
    from hqa.errors import ArtifactError
    from hqa.optimize import tracking

    tracking.setup(settings, autolog=False)
    try:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri.rstrip("/")))
    except Exception as exc:  # noqa: BLE001 - MLflow raises several types for a missing name/version
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ArtifactError(f"cannot fetch MLflow model {uri} from {settings.tracking_uri}: {first[:200]}") from None
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
