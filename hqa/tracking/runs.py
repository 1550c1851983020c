"""MLflow at run time: the tracking store and experiment (:func:`setup`), runs with their parameters, summaries and
report files (:func:`run`, :func:`log_summary`, :func:`log_report`: ``hqa evaluate`` and the compile jobs), and
traces of answered questions (:func:`enable_traces`: ``tracking.traces = true`` or an entry point's ``--trace``;
:func:`tool_span` for the agent's tool calls).  Answering or evaluating with tracing on needs only this module, not
the compile package; registry aliases and the run list are :mod:`hqa.tracking.registry`.

The default store is ``sqlite:///<artifacts>/mlflow.db`` (MLflow 3.17+ refuses the file store); any tracking URI can
be configured.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from hqa.config import Settings
from hqa.io.logs import quiet_libraries


def setup(settings: Settings, autolog: bool = True):
    """Point MLflow at the configured store and experiment; enable DSPy autologging (traces, compiles, evals)."""
    import mlflow

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # with a tracking server MLflow prints "View run at <url>" on stdout, which is hqa's output (JSON for compile)
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    for name in ("mlflow", "alembic", "mlflow.store.db.utils"):
        logging.getLogger(name).setLevel(logging.WARNING)
    quiet_libraries()  # MLflow installed its own (colouring) log handler on import
    settings.artifacts_dir.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(settings.tracking_uri)
    name = settings.tracking.experiment
    if mlflow.get_experiment_by_name(name) is None and settings.tracking_uri.startswith("sqlite:"):
        # with a sqlite store MLflow would put run artifacts in ./mlruns of whatever folder we run from
        location = (settings.artifacts_dir / "mlartifacts").resolve().as_uri()
        with contextlib.suppress(mlflow.exceptions.MlflowException):  # created concurrently by another process
            mlflow.create_experiment(name, artifact_location=location)
    mlflow.set_experiment(name)
    if autolog:
        mlflow.dspy.autolog(log_traces=True, log_traces_from_compile=False, log_traces_from_eval=True,
                            log_compiles=True, log_evals=True, silent=True)
    return mlflow


def enable_traces(settings: Settings, opened=None, *, store: bool = True) -> dict[str, str]:
    """Every question from here on an MLflow trace in the configured store (``tracking.traces = true`` or an entry
    point's ``--trace``): DSPy autologging gives the module, adapter and LM spans, :func:`tool_span` the agent's tool
    calls.  With ``opened`` (an :class:`hqa.app.OpenedProgram`) each trace is tagged with the program, and when that
    program is a logged MLflow model (``models:/NAME@ALIAS``, ``models:/NAME/N``, ``runs:/...``) the model is made
    MLflow's active model, so the traces are linked to it, and its URI and model id are tags too.  ``store=False``:
    the store is already set up (an active run's).  Returns the tags."""
    import dspy
    import mlflow

    if store:
        setup(settings, autolog=True)
    else:
        mlflow.dspy.autolog(log_traces=True, log_traces_from_compile=False, log_traces_from_eval=True,
                            log_compiles=False, log_evals=False, silent=True)
    tags: dict[str, str] = {}
    if opened is not None:
        tags = {"hqa.program": str(opened.label), "hqa.kind": str(opened.kind)}
        model_id = logged_model_id(opened)
        if model_id:
            tags.update({"hqa.model_uri": str(opened.source), "hqa.model_id": model_id})
            mlflow.set_active_model(model_id=model_id)
    trace_tags = _trace_tags_class()
    callbacks = [c for c in dspy.settings.get("callbacks", []) or [] if not isinstance(c, trace_tags)]
    dspy.settings.configure(callbacks=[*callbacks, trace_tags(tags)])  # after MLflow's: its span exists by then
    return tags


def logged_model_id(opened) -> str | None:
    """The MLflow LoggedModel id of a program opened from a logged model (``models:/...``, ``runs:/...``), else None."""
    import mlflow

    source = str(getattr(opened, "source", "") or "")
    if not source.startswith(("models:/", "runs:/")):
        return None
    return getattr(mlflow.models.get_model_info(source), "model_id", None) or None


@dataclass(frozen=True)
class TraceSpec:
    """Which questions of a batch job become MLflow traces, and where they go, as plain data a worker process can be
    given (:mod:`hqa.jobs.ray_engine`): the tracking store and experiment, the job's MLflow run the traces belong to,
    the share of questions traced (``tracking.trace_share``, drawn by question id) and the traces' tags."""

    uri: str
    experiment: str
    run_id: str | None = None
    share: float = 1.0
    tags: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, settings: Settings, run_id: str | None, tags: dict[str, str] | None = None) -> "TraceSpec":
        return cls(uri=settings.tracking_uri, experiment=settings.tracking.experiment, run_id=run_id,
                   share=float(settings.tracking.trace_share), tags=tuple(sorted((tags or {}).items())))

    def sampled(self, question_id: Any) -> bool:
        """Whether question ``question_id`` is traced: a draw from its id's SHA-256, so a rerun, a resume or
        another engine traces the same questions."""
        if self.share >= 1.0:
            return True
        digest = hashlib.sha256(str(question_id).encode("utf-8")).digest()
        return int.from_bytes(digest[:8], "big") / 2 ** 64 < self.share

    def start_here(self) -> None:
        """Make this process trace into the spec's store and experiment (a worker process: DSPy autologging's
        spans, the agent's tool spans)."""
        import mlflow

        os.environ.setdefault("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")
        mlflow.set_tracking_uri(self.uri)
        mlflow.set_experiment(self.experiment)
        mlflow.dspy.autolog(log_traces=True, log_traces_from_compile=False, log_traces_from_eval=True,
                            log_compiles=False, log_evals=False, silent=True)
        quiet_libraries()

    @contextlib.contextmanager
    def question(self, question_id: Any, remote: bool = False) -> Iterator[None]:
        """One question's scope: traced or not (:meth:`sampled`); ``remote`` (a worker process, where the job's
        run is not active): the trace is attached to the job's run and tagged here."""
        sampled = self.sampled(question_id)
        if not remote and sampled:
            yield
            return
        import mlflow

        metadata = {"mlflow.sourceRun": self.run_id} if remote and self.run_id else None
        with mlflow.tracing.context(metadata=metadata, tags=dict(self.tags) if remote else None,
                                    enabled=None if sampled else False):
            yield


@functools.lru_cache(maxsize=None)
def _trace_tags_class():  # built on first use: importing DSPy is not free
    from dspy.utils.callback import BaseCallback

    class TraceTags(BaseCallback):
        """Tags the trace a top-level module call opens (MLflow's DSPy callback has opened its root span)."""

        def __init__(self, tags: dict[str, str]):
            self.tags = tags

        def on_module_start(self, call_id, instance, inputs):
            import mlflow

            span = mlflow.get_current_active_span()
            if self.tags and span is not None and span.parent_id is None:
                mlflow.update_current_trace(tags=self.tags)

    return TraceTags


@contextlib.contextmanager
def tool_span(tool: str, arg: str) -> Iterator[Any]:
    """A TOOL span (inputs: the tool's input) around one agent tool call when it runs inside an MLflow trace; yields
    the span (the caller sets its outputs), or None outside a trace (then mlflow is not even imported)."""
    mlflow = sys.modules.get("mlflow")
    if mlflow is None or mlflow.get_current_active_span() is None:
        yield None
        return
    from mlflow.entities import SpanType

    with mlflow.start_span(name=tool, span_type=SpanType.TOOL) as span:
        span.set_inputs({"input": arg})
        yield span


def flat_params(prefix: str, data: dict[str, Any], none: str = "None") -> dict[str, str]:
    """``data`` as flat MLflow parameters (``prefix.key.subkey`` = the value as text, at most 500 characters; a
    None value is ``none``)."""
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            out.update(flat_params(name, value, none))
        else:
            out[name] = none if value is None else str(value)[:500]
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

    mlflow.log_metrics({**{f"{prefix}_{k}": v for k, v in summary.metrics.items()},
                        **{f"{prefix}_{k}_per_q": v for k, v in summary.cost.items()},
                        **{f"{prefix}_{k}": v for k, v in getattr(summary, "reliability", {}).items()},
                        f"{prefix}_errors": summary.errors, f"{prefix}_n": summary.n})
    if summary.path and Path(summary.path).exists():
        mlflow.log_artifact(str(summary.path), artifact_path="evaluation")


def log_report(run_dir: Path) -> None:
    """The report files of an evaluation folder as artifacts of the active run."""
    import mlflow

    from hqa.schemas.run_folder import RunFolder

    for path in RunFolder(run_dir).report_files():
        if path.exists():
            mlflow.log_artifact(str(path), artifact_path="evaluation")
