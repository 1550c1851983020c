"""The code of an hqa MLflow models-from-code pyfunc (see :mod:`hqa.optimize.mlflow_model`).

MLflow executes this file when the model loads; ``set_model`` at the bottom names the model object.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import mlflow
from mlflow.pyfunc import PythonModel

from hqa.errors import HQAError


def _questions(model_input: Any) -> list[str]:
    import pandas as pd  # mlflow depends on pandas

    if isinstance(model_input, pd.DataFrame):
        if "question" not in model_input.columns:
            raise HQAError("hqa model input needs a 'question' column")
        out: list[str] = []
        for q in model_input["question"].tolist():  # {"question": [q1, q2]} arrives as one row of a list
            out.extend(str(x) for x in q) if isinstance(q, (list, tuple)) else out.append(str(q))
        return out
    if isinstance(model_input, dict):
        q = model_input.get("question")
        return [str(x) for x in q] if isinstance(q, list) else [str(q)]
    if isinstance(model_input, str):
        return [model_input]
    if isinstance(model_input, list):
        return [str(x.get("question")) if isinstance(x, dict) else str(x) for x in model_input]
    raise HQAError(f"hqa model input must be a DataFrame/dict with 'question', got {type(model_input).__name__}")


def settings_overrides(table: Any) -> dict[str, Any]:
    """A loader's ``model_config={"settings": {"lm": {"provider": ..., "api_base": ..., "model": ...}}}`` (sections of
    hqa's settings; nothing of it is stored with the model) as :func:`hqa.config.load_settings` keywords: a Spark
    executor or a Ray actor that loads the model is given its LM this way when its environment cannot be set."""
    if not table:
        return {}
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise HQAError('model_config "settings" must be a table of settings sections, e.g. {"lm": {"model": "x"}}')
    return {f"{section}_{key}": value for section, values in table.items() for key, value in values.items()}


class HQAModel(PythonModel):
    def load_context(self, context) -> None:
        from hqa.app import open_program
        from hqa.config import load_settings

        config = dict(context.model_config or {})
        folder = Path(context.artifacts["program"])
        overrides = settings_overrides(config.get("settings"))
        # the world the program was compiled against, unless this process (or the loader's settings) names its own
        world = config.get("artifacts_dir")
        if world and not os.environ.get("HQA_PATHS__ARTIFACTS") and "paths_artifacts" not in overrides:
            overrides["paths_artifacts"] = world
        settings = load_settings(**overrides)
        try:
            self.opened = open_program(settings, load=folder)
        except HQAError as exc:
            raise HQAError(f"cannot load hqa model {config.get('name', folder.name)!r} with world "
                           f"{settings.artifacts_dir}: {exc} (set HQA_PATHS__ARTIFACTS to a built knowledge "
                           "pack's artifacts folder)") from None

    def predict(self, context, model_input, params=None):
        """One row per question; ``params`` are the program's runtime options (``{"k": 3}``), for this call only."""
        import pandas as pd

        from hqa.app import with_options

        # None = not given (MLflow fills every declared param, and an option left to the settings defaults to None)
        options = {k: v for k, v in (params or {}).items() if v is not None}
        program = with_options(self.opened.program, options)  # an unknown or out-of-range option is a ConfigError
        rows = []
        for question in _questions(model_input):
            pred = program(question=question)
            rows.append({"question": question, "answer": str(pred.answer),
                         "trace": json.dumps(getattr(pred, "trace", None) or {}, default=str, ensure_ascii=False)})
        return pd.DataFrame(rows, columns=["question", "answer", "trace"])


mlflow.models.set_model(HQAModel())
