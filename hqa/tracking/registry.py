"""MLflow on the compile side: registry aliases and the list of runs; runs and traces are :mod:`hqa.tracking.runs`,
re-exported here for the compile jobs.

Open the UI with ``mlflow ui --backend-store-uri sqlite:///artifacts/mlflow.db``.
"""

from __future__ import annotations

from typing import Any

from hqa.config import Settings
from hqa.errors import ArtifactError
from hqa.tracking.runs import flat_params, log_report, log_summary, run, setup  # noqa: F401 - the compile jobs' runs


def set_alias(settings: Settings, name: str, version: int | str, alias: str) -> str:
    """Point the registry alias ``alias`` of registered model ``name`` at ``version`` (MLflow's convention since
    stages were retired: ``models:/NAME@ALIAS``); returns that URI.  A missing model or version, or an alias MLflow
    refuses (one that looks like a version, ``latest``), is a one-line ArtifactError."""
    import mlflow

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
        metrics = {k[8:]: r[k] for k in df.columns if k.startswith("metrics.") and r[k] == r[k]}
        tags = {k[5:]: r[k] for k in df.columns if k.startswith("tags.") and isinstance(r[k], str)}
        rows.append({
            "run_id": r["run_id"], "name": tags.get("mlflow.runName") or "",
            "job": tags.get("job") or (r["params.job"] if isinstance(r.get("params.job"), str) else None),
            "status": r["status"], "start": str(r["start_time"])[:19], "metrics": metrics,
            "headline": headline_metrics(metrics), "record": {k: v for k, v in tags.items() if k.startswith("hqa.")},
            "parent": tags.get("mlflow.parentRunId"),
        })
    return rows


#: the metrics ``hqa runs`` shows of a run, in this order (a compile's dev evaluation, an evaluation, an arm)
HEADLINE = ("recall", "em", "f1", "hits1", "n", "errors", "parse_failure_rate", "retry_rate", "fallback_rate")


def headline_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """A run's headline metrics: :data:`HEADLINE` of its dev (compile, compare arm) or eval (evaluate) summary."""
    return {p + k: metrics[p + k] for p in ("dev_", "eval_") for k in HEADLINE if p + k in metrics}
