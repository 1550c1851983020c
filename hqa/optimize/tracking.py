"""MLflow tracking of compile side jobs: one run per compile or evaluation, nested child runs for comparisons,
their parameters, summaries and reports; registry aliases.  The store, the experiment and question traces are
:mod:`hqa.tracing` (run time); this module re-exports :func:`setup` for the compile jobs.

Open the UI with ``mlflow ui --backend-store-uri sqlite:///artifacts/mlflow.db``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

from hqa.config import Settings
from hqa.tracing import setup

def flat_params(prefix: str, data: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            out.update(flat_params(name, value))
        else:
            out[name] = str(value)[:500]
    return out


@contextlib.contextmanager
def run(settings: Settings, name: str, params: dict[str, Any] | None = None, nested: bool = False,
        tags: dict[str, str] | None = None, autolog: bool = True) -> Iterator[Any]:
    """An MLflow run with params logged; yields the active run.  ``nested`` runs join the active parent run (a
    compare's arms); without ``autolog`` DSPy's own trace logging stays off (an evaluation's traces are already in
    its predictions.jsonl)."""
    mlflow = setup(settings, autolog=autolog)
    with mlflow.start_run(run_name=name, nested=nested, tags=tags) as active:
        if params:
            mlflow.log_params(flat_params("", params))
        yield active


def log_summary(summary, prefix: str = "dev") -> None:
    import mlflow

    metrics = {f"{prefix}_{k}": v for k, v in summary.metrics.items()}
    metrics.update({f"{prefix}_{k}_per_q": v for k, v in summary.cost.items()})
    metrics[f"{prefix}_errors"] = summary.errors
    metrics[f"{prefix}_n"] = summary.n
    mlflow.log_metrics(metrics)
    if summary.path and Path(summary.path).exists():
        mlflow.log_artifact(str(summary.path), artifact_path="evaluation")


def log_report(run_dir: Path) -> None:
    """The report files of an evaluation folder as artifacts of the active run."""
    import mlflow

    for name in ("summary.md", "summary.json", "metrics.png", "agreement.png", "predictions.jsonl"):
        path = Path(run_dir) / name
        if path.exists():
            mlflow.log_artifact(str(path), artifact_path="evaluation")


def set_alias(settings: Settings, name: str, version: int | str, alias: str) -> str:
    """Point the registry alias ``alias`` of registered model ``name`` at ``version`` (MLflow's convention since
    stages were retired: ``models:/NAME@ALIAS``); returns that URI.  A missing model or version, or an alias MLflow
    refuses (one that looks like a version, ``latest``), is a one-line ArtifactError."""
    import mlflow

    from hqa.errors import ArtifactError

    setup(settings, autolog=False)
    client = mlflow.MlflowClient()
    try:
        client.get_model_version(name, str(version))
        client.set_registered_model_alias(name, alias, str(version))
    except mlflow.exceptions.MlflowException as exc:
        first = str(exc.message if hasattr(exc, "message") else exc).strip().splitlines()[0]
        raise ArtifactError(f"cannot set alias {alias!r} of registered model {name!r} to version {version} in "
                            f"{settings.tracking_uri}: {first[:200]}") from None
    return f"models:/{name}@{alias}"


def list_runs(settings: Settings, max_results: int = 50) -> list[dict[str, Any]]:
    import mlflow

    setup(settings, autolog=False)
    exp = mlflow.get_experiment_by_name(settings.tracking.experiment)
    if exp is None:
        return []
    df = mlflow.search_runs([exp.experiment_id], max_results=max_results, order_by=["start_time DESC"])
    rows = []
    for _, r in df.iterrows():
        rows.append({
            "run_id": r["run_id"],
            "name": r.get("tags.mlflow.runName"),
            "status": r["status"],
            "start": str(r["start_time"])[:19],
            "metrics": {k[8:]: r[k] for k in df.columns if k.startswith("metrics.") and r[k] == r[k]},
            "parent": r.get("tags.mlflow.parentRunId") if "tags.mlflow.parentRunId" in df.columns else None,
        })
    return rows
