"""Typed DSPy signatures; each docstring is the instruction an optimizer may rewrite."""

from hqa.signatures.basic import ClosedBookAnswer, EvidenceAnswer

__all__ = ["ClosedBookAnswer", "EvidenceAnswer"]
