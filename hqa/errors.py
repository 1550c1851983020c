"""User-facing error types: every error a user can cause is an :class:`HQAError`, which the CLI prints as one line
on stderr, exiting non-zero without a traceback.  Anything else is a bug and keeps its traceback.
"""


#: the longest question ``hqa ask`` and ``hqa serve`` take (characters; a value chosen here, not from a paper)
MAX_QUESTION_CHARS = 1000


def question_too_long(question: str, limit: int = MAX_QUESTION_CHARS) -> str | None:
    """The one-line reason ``question`` is refused for its length, or None when it fits ``limit``."""
    if len(question) > limit:
        return f"question is {len(question)} characters long; the limit is {limit}"
    return None


class HQAError(Exception):
    """Base class for errors whose message is meant for the user."""

    exit_code = 2


class ConfigError(HQAError):
    """Unknown key, wrong type or bad value in the configuration."""


class DataError(HQAError):
    """A dataset or trace file is missing, unreadable or has a malformed record."""


class PackMissingError(HQAError):
    """The knowledge pack has not been built (or is incomplete)."""


class WorldError(HQAError):
    """A world folder is missing, incomplete (an interrupted build) or has a malformed manifest."""


class EndpointError(HQAError):
    """A SPARQL endpoint or LM server could not be reached or answered with garbage."""


class QueryRejected(HQAError):
    """A SPARQL query was refused before execution (write operation, SERVICE, parse error)."""


class ArtifactError(HQAError):
    """A compiled-program artifact is missing, corrupt or does not match this installation."""
