"""What the ``hqa`` command shows on stderr besides its own lines: quiet by default, more with ``-v``.

* hqa's own warnings (the ``hqa`` logger: a part the user configured that cannot load, a damaged file) are shown
  as ``hqa: warning: …``, each message once per process;
* the libraries' log records (DSPy, LiteLLM, MLflow, Hugging Face, httpx, …) are shown from ERROR up, and their
  Python warnings (deprecations, truncation notices) not at all; ``-v`` shows their warnings too, each once, and
  ``-vv`` everything from INFO up;
* one handler writes it all (DSPy's and MLflow's own handlers are taken off), without terminal escape codes
  (``NO_COLOR`` is set for the libraries when stderr is not a terminal).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
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
        new = key not in self.seen
        self.seen.add(key)
        return new


_POLICY: dict[str, object] = {}  # what configure_output chose: verbose


def configure_output(verbose: int = 0, stream=None) -> None:
    """Set up stderr for one ``hqa`` command (see the module docstring); ``verbose`` counts ``-v``.  One handler, on
    the root logger, writes every record that reaches it."""
    if not _is_tty(stream or sys.stderr):
        os.environ.setdefault("NO_COLOR", "1")  # honoured by the libraries that colour (https://no-color.org)
    # MLflow sets its loggers' level from this when it is imported (later, by the commands that track)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "INFO" if verbose >= 2 else "WARNING" if verbose else "ERROR")
    handler = logging.StreamHandler(stream or _CurrentStderr())
    handler._hqa_output = True  # type: ignore[attr-defined]  # ours: replaced when configured again
    handler.setFormatter(_Plain())
    if verbose < 2:
        handler.addFilter(_Once())
    if verbose < 1:
        handler.addFilter(_ours_or_errors)  # any library's warnings (listed in LIBRARIES or not) wait for -v
    _POLICY.update(verbose=verbose)
    root = logging.getLogger()
    root.handlers[:] = [*_others(root), handler]
    root.setLevel(logging.INFO if verbose >= 2 else logging.WARNING)
    for name in ("hqa", "py.warnings"):
        logger = logging.getLogger(name)
        logger.handlers[:] = _others(logger)
        logger.propagate = True
    logging.getLogger("hqa").setLevel(logging.INFO if verbose >= 2 else logging.WARNING)
    quiet_libraries()
    warnings.resetwarnings()
    if verbose:
        warnings.simplefilter("once")
    else:
        warnings.simplefilter("ignore")
        warnings.filterwarnings("default", module=r"hqa(\.|$)")  # hqa's own warnings stay visible
    logging.captureWarnings(True)


def quiet_libraries() -> None:
    """Apply :func:`configure_output`'s policy to the libraries' loggers: their level, and their records to the one
    handler — the handlers DSPy and MLflow install on import (after the command started; MLflow's colours its
    text) are taken off.  Called again where hqa imports DSPy (:func:`hqa.app.configure_dspy`) and MLflow
    (:func:`hqa.tracking.runs.setup`); a no-op outside the ``hqa`` command (a library user keeps their own logging)."""
    if "verbose" not in _POLICY:
        return
    verbose = int(_POLICY["verbose"])  # type: ignore[arg-type]
    level = logging.INFO if verbose >= 2 else logging.WARNING if verbose == 1 else logging.ERROR
    for name in LIBRARIES:
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.handlers[:] = [h for h in logger.handlers if h in logging.root.handlers]
        logger.propagate = True


@contextlib.contextmanager
def library_chatter(name: str):
    """Inside, what a library prints to stdout and the progress bars it draws follow :func:`configure_output`'s
    policy: at the default level its printed lines become INFO records of its logger (shown with ``-vv``) and its
    tqdm bars are not drawn (DSPy's optimizers print "Bootstrapped N full traces …" and draw an unlabelled bar over
    the training set); with ``-v`` they show on stderr, never on stdout (hqa's output).  Outside the ``hqa``
    command (a library user's own process) nothing changes."""
    if "verbose" not in _POLICY:
        yield
        return
    import io
    from functools import partialmethod

    import tqdm

    verbose = int(_POLICY["verbose"])  # type: ignore[arg-type]
    logger = logging.getLogger(name)
    sink = sys.stderr if verbose else io.StringIO()
    init = tqdm.tqdm.__init__
    if not verbose:
        tqdm.tqdm.__init__ = partialmethod(init, disable=True)  # type: ignore[method-assign]
    try:
        with contextlib.redirect_stdout(sink):
            yield
    finally:
        tqdm.tqdm.__init__ = init  # type: ignore[method-assign]
        if isinstance(sink, io.StringIO):
            for line in sink.getvalue().splitlines():
                if line.strip():
                    logger.info(line.strip())


_HQA_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the hqa package's folder


def _is_ours(record: logging.LogRecord) -> bool:
    """hqa's own record: its loggers', or a Python warning raised in hqa's code.  A warning raised in a library's
    file is the library's, whatever filters the library set for it (MLflow shows its "Add type hints" notice once
    per model log under a filter of its own, from its own file)."""
    if record.name == "py.warnings":
        return str(record.args[0] if record.args else record.msg).startswith(_HQA_DIR + os.sep)
    return record.name == "hqa" or record.name.startswith("hqa.")


def _ours_or_errors(record: logging.LogRecord) -> bool:
    return _is_ours(record) or record.levelno >= logging.ERROR


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class _Plain(logging.Formatter):
    """``hqa: <level>: <message>`` for hqa's records and the Python warnings, ``<logger>: <level>: <message>`` for a
    library's; terminal escape sequences dropped (MLflow colours its warnings' text itself)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return _ANSI.sub("", f"{'hqa' if _is_ours(record) else record.name}: {record.levelname.lower()}: {text}")


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time (a test's capture, a redirected stream)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _others(logger: logging.Logger) -> list[logging.Handler]:
    return [h for h in logger.handlers if not getattr(h, "_hqa_output", False)]


def _is_tty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


__all__ = ["LIBRARIES", "configure_output", "library_chatter", "quiet_libraries"]
