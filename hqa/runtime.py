"""Wire settings into DSPy: the LM, the adapter and the process toolbox."""

from __future__ import annotations

from hqa.config import Settings
from hqa.retrievers.registry import Toolbox, use_toolbox


def configure_dspy(settings: Settings, lm=None):
    """Configure DSPy with the settings' LM.

    The embedded model gets DSPy's JSONAdapter: its structured-output request becomes a llama.cpp grammar, so a
    135M model still returns well-formed fields.  Remote models keep DSPy's default ChatAdapter (which itself falls
    back to JSON on a parse failure).
    """
    import dspy

    from hqa.lm import build_lm

    lm = lm or build_lm(settings)
    # LM replies are cached per project (artifacts/cache/dspy), so reruns of an evaluation cost no LM calls
    dspy.configure_cache(disk_cache_dir=str(settings.artifacts_dir / "cache" / "dspy"))
    adapter = dspy.JSONAdapter() if settings.lm.provider == "local" else dspy.ChatAdapter()
    dspy.configure(lm=lm, adapter=adapter)
    return lm


def install_toolbox(settings: Settings, name: str = "default", check: bool = True) -> Toolbox:
    tb = Toolbox(settings)
    if check:
        tb.check()
    return use_toolbox(tb, name)
