"""SQUALL → SPARQL for HumanIQ's GenerateSparql tool (HumanIQ §3; the language is Ferré's SQUALL).

``translate(squall)`` gives the SPARQL; ``observation(squall)`` the tool's observation (the SPARQL or HumanIQ's
syntax-error message).  See ``docs/squall.md``.
"""

from hqa.squall.lexer import SquallSyntaxError
from hqa.squall.translate import SYNTAX_ERROR_OBSERVATION, canonical, observation, translate

__all__ = ["SYNTAX_ERROR_OBSERVATION", "SquallSyntaxError", "canonical", "observation", "translate"]
