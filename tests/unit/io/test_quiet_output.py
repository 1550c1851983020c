"""``hqa`` is quiet by default: hqa's own warnings once each, the libraries' warnings and log records only with
``-v`` (each once), and no terminal escape codes in what it writes (tests/integration/test_import_boundary.py checks a default
``hqa ask`` writes nothing on stderr at all)."""

from __future__ import annotations

import io
import logging
import warnings

import pytest

from hqa.io.logs import configure_output


@pytest.fixture()
def output():
    saved = {name: (logging.getLogger(name).level, list(logging.getLogger(name).handlers))
             for name in ("", "hqa", "dspy", "mlflow", "py.warnings")}
    stream = io.StringIO()
    with warnings.catch_warnings():
        yield stream
    for name, (level, handlers) in saved.items():
        logging.getLogger(name).setLevel(level)
        logging.getLogger(name).handlers[:] = handlers
    logging.captureWarnings(False)


def _noise():
    logging.getLogger("hqa.retrievers").warning("a part you configured cannot load")
    logging.getLogger("hqa.retrievers").warning("a part you configured cannot load")  # said once
    logging.getLogger("dspy.primitives.module").warning("Calling module.forward(...) directly is discouraged")
    logging.getLogger("mlflow.models").warning("\x1b[33mmodel logged\x1b[0m")
    warnings.warn_explicit("\x1b[33mAdd type hints\x1b[0m", UserWarning, "mlflow/pyfunc.py", 1, module="mlflow.pyfunc")
    warnings.warn_explicit("\x1b[33mAdd type hints\x1b[0m", UserWarning, "mlflow/pyfunc.py", 1, module="mlflow.pyfunc")


def test_default_shows_only_hqa_warnings_once(output):
    configure_output(0, stream=output)
    _noise()
    assert output.getvalue() == "hqa: warning: a part you configured cannot load\n"


def test_verbose_shows_library_warnings_once_without_escape_codes(output):
    configure_output(1, stream=output)
    _noise()
    text = output.getvalue()
    assert "\x1b" not in text
    assert text.count("a part you configured cannot load") == 1
    assert text.count("Calling module.forward") == 1 and text.count("model logged") == 1
    assert text.count("Add type hints") == 1
