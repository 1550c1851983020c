"""DSPy's chat and JSON adapters as hqa runs them: a reply that does not fill the signature's fields is a parse
failure, counted, never a value.

Why (issue 53): DSPy's ``parse_value`` turns any JSON value of a ``str`` output field into ``str(value)``, so a
JSON object a small model wrote where an answer was asked for became the answer as its Python repr
(``{'title': 'Animal Farm', ...}``).  Here such a reply raises :class:`~dspy.utils.exceptions.AdapterParseError`
like any other unparsable reply: the program's ``safe_predict`` records the failure and takes its own fallback,
which the answer then names (:func:`hqa.answering.presentation.fallback_of`).  Every parse failure, and every LM
request the chat adapter's JSON fallback makes again, is reported to the question's recorders
(:func:`hqa.lm.calls.note_parse_failure`, :func:`hqa.lm.calls.note_retry`), so runs count them.

Numbers and booleans in a text field stay accepted as their text (``1984`` for a year); only objects and arrays
are refused.
"""

from __future__ import annotations

import json
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from hqa.lm.calls import note_parse_failure, note_retry

ADAPTERS = ("auto", "chat", "json")  # lm.adapter


def _raw_object(completion: str) -> dict[str, Any]:
    """The JSON object a reply holds as written (before DSPy casts its values), {} when it holds none."""
    try:
        value = json.loads(completion)
    except ValueError:
        import json_repair

        value = json_repair.loads(completion)
    return value if isinstance(value, dict) else {}


def refuse_structures(signature: Any, completion: str, adapter: str) -> None:
    """AdapterParseError when a ``str`` output field of ``signature`` holds a JSON object or array in the reply."""
    raw = _raw_object(completion)
    for name, field in signature.output_fields.items():
        value = raw.get(name)
        if field.annotation is str and isinstance(value, (dict, list)):
            kind = "object" if isinstance(value, dict) else "array"
            raise AdapterParseError(adapter_name=adapter, signature=signature, lm_response=completion,
                                    message=f"field `{name}` holds a JSON {kind} where text was asked for")


class StrictJSONAdapter(dspy.JSONAdapter):
    """DSPy's JSONAdapter whose text fields refuse JSON objects and arrays; each parse failure is reported."""

    def parse(self, signature, completion):
        try:
            fields = super().parse(signature, completion)
            refuse_structures(signature, completion, type(self).__name__)
            return fields
        except AdapterParseError as exc:
            note_parse_failure(exc)
            raise


class StrictChatAdapter(dspy.ChatAdapter):
    """DSPy's ChatAdapter whose parse failures are reported and whose JSON fallback (one more LM request, counted
    as a retry) is the strict JSON adapter."""

    def parse(self, signature, completion):
        try:
            return super().parse(signature, completion)
        except AdapterParseError as exc:
            note_parse_failure(exc)
            raise

    def _make_json_adapter_fallback(self):
        note_retry("the chat format's reply could not be parsed; asked again for JSON")
        return StrictJSONAdapter(use_native_function_calling=self.use_native_function_calling,
                                 parallel_tool_calls=self.parallel_tool_calls)


def adapter_for(lm_config: Any) -> dspy.ChatAdapter:
    """The adapter of the settings' LM (``lm.adapter``): ``auto`` is the JSON adapter for the embedded model (its
    schema becomes a llama.cpp grammar) and for an OpenAI-compatible server (its schema goes out in the server's
    spelling, ``lm.response_format``), the chat adapter for OpenAI; ``chat`` / ``json`` choose."""
    choice = lm_config.adapter
    if choice == "auto":
        choice = "chat" if lm_config.provider == "openai" else "json"
    return StrictJSONAdapter() if choice == "json" else StrictChatAdapter()


__all__ = ["ADAPTERS", "StrictChatAdapter", "StrictJSONAdapter", "adapter_for", "refuse_structures"]
