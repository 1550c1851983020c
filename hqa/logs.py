"""What the ``hqa`` command shows on stderr besides its own lines: quiet by default, more with ``-v``.

* hqa's own warnings (the ``hqa`` logger: a part the user configured that cannot load, a damaged file) are shown
  as ``hqa: warning: …``, each message once per process;
* the libraries' log records (DSPy, LiteLLM, MLflow, Hugging Face, httpx, …) are shown from ERROR up, and their
  Python warnings (deprecations, truncation notices) not at all; ``-v`` shows their warnings too, each once, and
  ``-vv`` everything from INFO up;
* nothing is coloured when stderr is not a terminal (``NO_COLOR``; MLflow's and DSPy's handlers get a plain
  formatter).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

#: loggers of the libraries hqa runs on (their records are theirs, not hqa's)
LIBRARIES = ("dspy", "LiteLLM", "litellm", "mlflow", "alembic", "httpx", "httpcore", "urllib3", "huggingface_hub",
             "transformers", "sentence_transformers", "filelock", "optuna", "numexpr", "matplotlib", "PIL",
             "asyncio", "uvicorn", "fastapi", "onnxruntime", "datasets", "fsspec", "git")


class _Once(logging.Filter):
    """Lets each distinct message through once per process."""

    def __init__(self):
        super().__init__()
        self.seen: set[tuple[str, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.getMessage())
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


_POLICY: dict[str, object] = {}  # what configure_output chose: verbose, the once-filter, the hqa handler


def configure_output(verbose: int = 0, stream=None) -> None:
    """Set up stderr for one ``hqa`` command (see the module docstring); ``verbose`` counts ``-v``."""
    if not _is_tty(stream or sys.stderr):
        os.environ.setdefault("NO_COLOR", "1")  # honoured by the libraries that colour (https://no-color.org)
    # MLflow sets its loggers' level from this when it is imported (later, by the commands that track)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "INFO" if verbose >= 2 else "WARNING" if verbose else "ERROR")
    once = _Once()
    handler = logging.StreamHandler(stream or _CurrentStderr())
    handler._hqa_output = True  # type: ignore[attr-defined]  # ours: replaced when configured again
    handler.setFormatter(logging.Formatter("hqa: %(levelname_lower)s: %(message)s"))
    handler.addFilter(_lower_level)
    if verbose < 2:
        handler.addFilter(once)
    _POLICY.update(verbose=verbose, once=once)
    hqa_log = logging.getLogger("hqa")
    hqa_log.handlers[:] = [*_others(hqa_log), handler]  # (the root has no handler in the command: shown once)
    hqa_log.setLevel(logging.INFO if verbose >= 2 else logging.WARNING)
    quiet_libraries()
    warnings.resetwarnings()
    if verbose:
        warnings.simplefilter("once")
    else:
        warnings.simplefilter("ignore")
        warnings.filterwarnings("default", module=r"hqa(\.|$)")  # hqa's own warnings stay visible
    logging.captureWarnings(True)
    py_warnings = logging.getLogger("py.warnings")
    py_warnings.handlers[:] = [*_others(py_warnings), handler]


def quiet_libraries() -> None:
    """Apply :func:`configure_output`'s policy to the libraries' loggers: their level, and their own handlers (which
    DSPy and MLflow install when they are imported, after the command started) plain text, each message once.
    Called again where hqa imports DSPy (:func:`hqa.app.configure_dspy`) and MLflow (:func:`hqa.tracing.setup`);
    a no-op outside the ``hqa`` command (a library user keeps their own logging)."""
    if "verbose" not in _POLICY:
        return
    verbose = int(_POLICY["verbose"])  # type: ignore[arg-type]
    level = logging.INFO if verbose >= 2 else logging.WARNING if verbose == 1 else logging.ERROR
    plain = logging.Formatter("%(name)s: %(levelname_lower)s: %(message)s")
    for name in LIBRARIES:
        logger = logging.getLogger(name)
        logger.setLevel(level)
        for h in logger.handlers:
            if h in logging.root.handlers:  # shared with the root (a library aliasing its list): not the library's
                continue
            h.setFormatter(plain)  # MLflow's formatter colours warnings with escape codes
            if _lower_level not in h.filters:
                h.addFilter(_lower_level)
            if verbose < 2 and _POLICY["once"] not in h.filters:
                h.addFilter(_POLICY["once"])  # type: ignore[arg-type]


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time (a test's capture, a redirected stream)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _others(logger: logging.Logger) -> list[logging.Handler]:
    return [h for h in logger.handlers if not getattr(h, "_hqa_output", False)]


def _lower_level(record: logging.LogRecord) -> bool:
    record.levelname_lower = record.levelname.lower()
    return True


def _is_tty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


__all__ = ["LIBRARIES", "configure_output", "quiet_libraries"]
