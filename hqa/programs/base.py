"""The base class of every program: what a program declares about itself, read from the class without building it
(:mod:`hqa.programs` names the programs without importing DSPy)."""

from __future__ import annotations

from typing import Any

import dspy

from hqa.programs.arguments import Arguments as _Arguments, resolve_settings, validate


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
    #: the program's arguments model (:mod:`hqa.programs.arguments`): names, bounds, which a serve request may set
    #: (``runtime``) and which the settings decide; the constructor validates through it
    Arguments: type[_Arguments] = _Arguments
    #: per-question human demo selection (DPP / relevance / diversity / random) serves this program
    per_question_demos = False
    #: a HumanIQ program: built without a compile, :func:`hqa.app.open_program` runs it with HumanIQ's answer-time
    #: selection of human processes (:func:`hqa.artifacts.dpp_program.human_processes`; HumanIQ §2-3)
    humaniq_processes = False

    def take_arguments(self, given: dict[str, Any]) -> dict[str, Any]:
        """The constructor's arguments (its ``locals()``: the keyword form) validated by the class's
        :attr:`Arguments` (ArgumentError naming the first bad one); with a toolbox given, the fields the settings
        decide that are still unset are resolved from its settings — once, here, for a program built directly (one
        opened by :func:`hqa.app.open_program` has them resolved already), never at forward time."""
        values = {k: v for k, v in given.items() if k not in ("self", "toolbox") and not k.startswith("__")}
        values = validate(self.Arguments, values, type(self).__name__)
        settings = getattr(given.get("toolbox"), "settings", None)
        if settings is not None:
            values.update(resolve_settings(self.Arguments, settings, values))
        return values

    def init_human_processes(self, demos: str, shots: int, human_library: str | None) -> None:
        """The arguments of HumanIQ's answer-time demo selection (HumanIQ §2-3), for a ``humaniq_processes`` program
        (validated by its :attr:`Arguments`): ``demos`` — ``dpp`` (the paper's), ``relevance``, ``diversity``,
        ``random`` (RQ5's ablations) or ``none`` (zero-shot); ``shots`` — how many processes (k = 3, HumanIQ §4);
        ``human_library`` — the benchmark whose library serves the questions (``compmix``, ``mintaka``, ``qald``;
        None: set by :func:`hqa.app.open_program` from the evaluated dataset or ``programs.human_library``)."""
        self.demos, self.shots, self.human_library = demos, shots, human_library

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from hqa.lm.calls import name_predictors

        name_predictors(self)  # each predictor keeps its own name in traces and records (a no-op once named)
        return super().__call__(*args, **kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        from hqa.lm.calls import name_predictors

        name_predictors(self)
        return await super().acall(*args, **kwargs)

    def toolbox_or_fail(self):
        """The toolbox given at construction; a clear error for a program built without one."""
        toolbox = getattr(self, "toolbox", None)
        if toolbox is None or isinstance(toolbox, str):  # a name: toolboxes were once looked up by name
            from hqa.errors import ConfigError

            raise ConfigError(f"{type(self).__name__} needs a toolbox: build it with toolbox=Toolbox(settings) "
                              "or open it with hqa.app.open_program")
        return toolbox

