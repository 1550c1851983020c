"""The base class of every program: what a program declares about itself, read from the class without building it
(:mod:`hqa.programs` names the programs without importing DSPy)."""

from __future__ import annotations

from typing import Any

import dspy


#: a HumanIQ program's ``demos`` argument: a selection mode of :data:`hqa.artifacts.dpp.MODES` (named here, not
#: imported: the run-time selector imports the programs), or ``none`` (zero-shot)
DEMO_SELECTIONS = ("dpp", "relevance", "diversity", "random", "none")


class Program(dspy.Module):
    """What every program declares about itself (read from the class, without building it)."""

    #: retrieval parts (a :class:`hqa.toolbox.Toolbox`) are given as ``toolbox``
    needs_toolbox = False
    #: the LM writes SPARQL (its guard's parser is warmed before the first question)
    writes_sparql = False
    #: CLI name -> constructor arguments that name sets itself (``cot`` is ClosedBook with ``cot=True``)
    fixed_kwargs: dict[str, dict[str, Any]] = {}
    #: per-call options (``hqa serve``'s ``options``): name -> (type, low, high) or (type, choices); read at
    #: forward time, so a copy with other values is safe
    runtime_options: dict[str, tuple] = {}
    #: per-question human demo selection (DPP / relevance / diversity / random) serves this program
    per_question_demos = False
    #: a HumanIQ program: built without a compile, :func:`hqa.app.open_program` runs it with HumanIQ's answer-time
    #: selection of human processes (:func:`hqa.artifacts.dpp_program.human_processes`; HumanIQ §2-3)
    humaniq_processes = False

    def init_human_processes(self, demos: str, shots: int, human_library: str | None) -> None:
        """The arguments of HumanIQ's answer-time demo selection (HumanIQ §2-3), for a ``humaniq_processes`` program:
        ``demos`` — ``dpp`` (the paper's), ``relevance``, ``diversity``, ``random`` (RQ5's ablations) or ``none``
        (zero-shot); ``shots`` — how many processes (k = 3, HumanIQ §4); ``human_library`` — the benchmark whose
        library serves the questions (``compmix``, ``mintaka``, ``qald``; None: set by
        :func:`hqa.app.open_program` from the evaluated dataset or ``programs.human_library``)."""
        from hqa.data.human import DATASETS

        self.demos = self.one_of("demos", demos, DEMO_SELECTIONS)
        if isinstance(shots, bool) or not isinstance(shots, int) or not 0 <= shots <= 20:
            from hqa.errors import ConfigError

            raise ConfigError(f"shots must be a whole number from 0 to 20, got {shots!r}")
        self.shots = shots
        self.human_library = None if human_library is None else self.one_of("human_library", human_library, DATASETS)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from hqa.lm.calls import name_predictors

        name_predictors(self)  # each predictor keeps its own name in traces and records (a no-op once named)
        return super().__call__(*args, **kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        from hqa.lm.calls import name_predictors

        name_predictors(self)
        return await super().acall(*args, **kwargs)

    @staticmethod
    def one_of(name: str, value: Any, allowed: tuple) -> Any:
        """``value`` when it is one of ``allowed``; a ConfigError naming the constructor argument otherwise."""
        if value not in allowed:
            from hqa.errors import ConfigError

            raise ConfigError(f"{name} must be one of {', '.join(map(str, allowed))}, got {value!r}")
        return value

    def toolbox_or_fail(self):
        """The toolbox given at construction; a clear error for a program built without one."""
        toolbox = getattr(self, "toolbox", None)
        if toolbox is None or isinstance(toolbox, str):  # a name: toolboxes were once looked up by name
            from hqa.errors import ConfigError

            raise ConfigError(f"{type(self).__name__} needs a toolbox: build it with toolbox=Toolbox(settings) "
                              "or open it with hqa.app.open_program")
        return toolbox
