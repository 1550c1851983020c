"""hqa: hybrid-source question answering (text + Wikidata-style KG + LM memory) as compiled DSPy programs."""

from __future__ import annotations

from hqa.version import __version__


def load(path, settings=None, configure: bool = True):
    """Load a compiled program folder (``artifacts/programs/<name>``) for inference.

    Rebuilds the program from its manifest, loads its compiled state, gives it its retrievers, and (with
    ``configure``) configures DSPy with the LM of the current settings unless an LM is already configured.
    """
    import dspy

    from hqa.app import open_program
    from hqa.config import load_settings

    settings = settings or load_settings()
    return open_program(settings, load=path, configure=configure and dspy.settings.lm is None).program


__all__ = ["load", "__version__"]
