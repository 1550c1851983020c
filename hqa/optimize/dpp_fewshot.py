"""Per-question few-shot selection of human solution processes with a DPP (HumanIQ §2), as a DSPy teleprompter:
``DPPFewShot(k=3).compile(student, trainset=load_human_library())`` returns a
:class:`hqa.artifacts.dpp_program.DPPProgram` (the run-time program, which saves and loads without this module).
"""

from __future__ import annotations

from collections.abc import Sequence

import dspy

from hqa.artifacts.dpp_program import DemoBuilder, DPPProgram, Embedder, check_selector, default_demo_builders
from hqa.data.human import HumanDemo
from hqa.errors import ConfigError


class DPPFewShot(dspy.teleprompt.Teleprompter):
    """Compile a student into a :class:`DPPProgram` that selects ``k`` human demos per question.

    ``mode``: ``"dpp"`` (relevance × diversity, the HumanIQ method), ``"relevance"``, ``"diversity"`` or
    ``"random"`` (seeded by ``seed`` and the question).  ``embedder``: an embedding model name for
    :func:`hqa.retrievers.embed.get_embedder` (default: the packaged MiniLM) or a callable ``texts -> array``.
    ``demo_builders`` maps a predictor name of the student (as in ``student.named_predictors()``) to a function
    turning a :class:`HumanDemo` into that predictor's demo; default :func:`default_demo_builders`.
    ``demo_variants`` maps a predictor name to the library variant it draws from (default ``full``).
    """

    def __init__(
        self,
        k: int = 3,
        mode: str = "dpp",
        seed: int = 0,
        embedder: str | Embedder | None = None,
        demo_builders: dict[str, DemoBuilder] | None = None,
        demo_variants: dict[str, str] | None = None,
    ):
        super().__init__()
        check_selector(mode, k)
        self.k = int(k)
        self.mode = mode
        self.seed = int(seed)
        self.embedder = embedder
        self.demo_builders = demo_builders
        self.demo_variants = demo_variants

    def compile(self, student: dspy.Module, *, trainset: Sequence[HumanDemo], **kwargs) -> DPPProgram:
        library = []
        for i, item in enumerate(trainset):
            if isinstance(item, HumanDemo):
                library.append(item)
            elif isinstance(item, dict):
                library.append(HumanDemo.from_dict(item))
            else:
                raise ConfigError(f"DPPFewShot trainset item {i} is a {type(item).__name__}, not a HumanDemo")
        builders = default_demo_builders() if self.demo_builders is None else self.demo_builders
        names = [name for name, _ in student.named_predictors()]
        unknown = [b for b in builders if b not in names]
        if unknown:
            raise ConfigError(
                f"demo builders name predictors {unknown} that the student does not have; "
                f"its predictors are {names}"
            )
        program = DPPProgram(
            student.deepcopy(),
            library,
            k=self.k,
            mode=self.mode,
            seed=self.seed,
            embedder=self.embedder,
            demo_builders=self.demo_builders,
            demo_variants=self.demo_variants,
        )
        return program.prepare()


__all__ = ["DPPFewShot", "DPPProgram", "default_demo_builders"]
