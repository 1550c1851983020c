"""How much of a run's prompt tokens a provider's prompt-prefix cache can serve, given the program's step layout.

The rule is OpenAI's, as documented in its prompt-caching guide (https://platform.openai.com/docs/guides/prompt-caching,
read 2026-11): a prompt is cached only from 1,024 tokens on, a cache hit is an *exact prefix* match with a prompt
sent before, and the cached part grows in increments of 128 tokens.  :class:`ProviderCache` applies it (the loopback
LM stand-in, ``standins/openai_lm.py``, accounts its ``cached_tokens`` with it too); :class:`PromptRecorder` keeps
each LM request's token count and prefix digests (``lm_prompts`` of a predictions row, no prompt text) and
:func:`prefix_share` replays a run's rows through the cache: an upper bound under the rule, counted in tiktoken's
``cl100k_base`` tokens.  docs/evaluation.md ("Prefix cache share") says what each share means and its limits.
"""

from __future__ import annotations

import functools
import hashlib
import os
from array import array
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from hqa.errors import DataError

#: OpenAI's documented rule (see the module docstring)
MINIMUM, STEP = 1024, 128
SOURCE = "https://platform.openai.com/docs/guides/prompt-caching"
TOKENIZER = "cl100k_base"  # GPT-4's tokenizer (tiktoken)


def encoding():
    """tiktoken's cl100k_base, read offline from the copy litellm (a DSPy dependency) ships when tiktoken has no
    cached one; litellm itself is not imported (its import fetches a cost map)."""
    import importlib.util

    import tiktoken

    spec = importlib.util.find_spec("litellm")
    bundled = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers" if spec and spec.origin else None
    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    if old is None and bundled is not None and bundled.is_dir():
        os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)
    try:
        return tiktoken.get_encoding(TOKENIZER)
    except Exception as exc:  # noqa: BLE001 - tiktoken raises requests errors when it must download offline
        raise DataError(f"cannot load the {TOKENIZER} tokenizer offline ({type(exc).__name__}); set "
                        "TIKTOKEN_CACHE_DIR to a folder holding its cached file") from None
    finally:
        if old is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR", None)


def _message_texts(messages: Sequence[dict]) -> list[str]:
    """Each message as ``<role>\\ncontent`` (content parts joined)."""
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"<{m.get('role')}>\n{content or ''}")
    return parts


def prompt_text(messages: Sequence[dict]) -> str:
    """The text of a chat request's messages, role by role (content parts joined)."""
    return "\n".join(_message_texts(messages))


def prefix_marks(tokens: Sequence[Any], minimum: int | None = None, step: int | None = None) -> list[str]:
    """Digests of ``tokens[:n]`` for every cacheable length n (``minimum``, ``minimum + step``, … ≤ len; default
    :data:`MINIMUM` / :data:`STEP`): two prompts share the prefix of length n exactly when their n-th marks are
    equal."""
    minimum, step = minimum or MINIMUM, step or STEP
    if len(tokens) < minimum:
        return []
    h = hashlib.blake2b(digest_size=8)
    marks, done = [], 0
    try:  # token ids (a tokenizer's): hashed as 8-byte integers, a quarter of the time of joined text
        data, width = array("q", tokens).tobytes(), 8
    except TypeError:  # token strings (the stand-in's): hashed as text
        data, width = None, 0
    for end in range(minimum, len(tokens) + 1, step):
        if data is not None:
            h.update(data[done * width:end * width])
        else:
            h.update("\x00".join(map(str, tokens[done:end])).encode())
            h.update(b"\x01")
        done = end
        marks.append(h.copy().hexdigest())
    return marks


class ProviderCache:
    """Prompt-prefix cache accounting under the rule above (``minimum`` / ``step`` configurable); thread-safe."""

    def __init__(self, minimum: int | None = None, step: int | None = None):
        self.minimum, self.step = minimum or MINIMUM, step or STEP
        self.seen: set[str] = set()
        self.lock = threading.Lock()

    def serve(self, marks: Sequence[str]) -> int:
        """Tokens a prompt with these :func:`prefix_marks` gets from the cache (the longest prefix seen before);
        its own prefixes are remembered for later prompts."""
        hit = 0
        with self.lock:
            for i, mark in enumerate(marks):
                if mark not in self.seen:
                    break
                hit = self.minimum + i * self.step
            self.seen.update(marks)
        return hit

    def cached(self, tokens: Sequence[Any]) -> int:
        """:meth:`serve` of the prompt ``tokens``."""
        return self.serve(prefix_marks(tokens, self.minimum, self.step))

    def clear(self) -> None:
        with self.lock:
            self.seen.clear()


def _tokenize_cl100k() -> Callable[[str], list[int]]:
    enc = encoding()
    return enc.encode_ordinary  # special tokens' text counted as text


#: how a recorded prompt is turned into tokens (cl100k_base; loaded on first use)
_TOKENIZE: list[Callable[[str], Sequence[Any]]] = []


def _tokenizer() -> Callable[[str], Sequence[Any]]:
    if not _TOKENIZE:
        _TOKENIZE.append(_tokenize_cl100k())
    return _TOKENIZE[0]


@functools.lru_cache(maxsize=1024)
def _message_tokens(tokenizer: Callable[[str], Sequence[Any]], text: str) -> Sequence[Any]:
    tokens = tokenizer(text)
    try:  # token ids: 8 bytes each, not a Python int each
        return array("q", tokens)
    except TypeError:  # token strings (the stand-in's)
        return tuple(tokens)


def prompt_tokens(messages: Sequence[dict], tokenizer: Callable[[str], Sequence[Any]] | None = None) -> Sequence[Any]:
    """The tokens of :func:`prompt_text` (by ``tokenizer``, default cl100k), each message tokenized once and remembered
    (bounded LRU): an agent resends its instructions, demos and earlier turns at every step, so a step tokenizes only
    its new message.

    The tokens are those of the whole text: every message after the first starts with ``<``, and no piece of
    cl100k's pre-tokenizer runs from a newline into a following ``<`` (a newline run is a piece of whitespace only,
    and no other piece starts with a newline), so ``a + "\\n" + b`` gives the tokens of ``a + "\\n"``, then those
    of ``b``.
    """
    tokenizer, texts = tokenizer or _tokenizer(), _message_texts(messages)
    parts = [_message_tokens(tokenizer, text + "\n" if i < len(texts) - 1 else text) for i, text in enumerate(texts)]
    if all(isinstance(p, array) for p in parts):
        joined = array("q")
        for p in parts:
            joined.extend(p)
        return joined
    return [token for p in parts for token in p]


@functools.lru_cache(maxsize=1)
def _recorder_class():
    from dspy.utils.callback import BaseCallback

    class PromptRecorder(BaseCallback):
        """Records each LM request of one question as ``{"tokens": n, "marks": [...]}`` (:func:`prefix_marks` of
        its prompt).  A prompt that cannot be tokenized (no tokenizer offline) is recorded as ``{"tokens": None}``,
        never failing the question."""

        def __init__(self):
            self.calls: list[dict] = []

        def on_lm_start(self, call_id, instance, inputs):
            messages = inputs.get("messages") or [{"role": "user", "content": inputs.get("prompt") or ""}]
            try:
                tokens = prompt_tokens(messages)
            except DataError:
                self.calls.append({"tokens": None, "marks": []})
                return
            self.calls.append({"tokens": len(tokens), "marks": prefix_marks(tokens)})

    return PromptRecorder


def PromptRecorder():  # noqa: N802 - builds the callback (DSPy imported only when one is used)
    return _recorder_class()()


def prefix_share(rows: Iterable[dict]) -> dict[str, Any] | None:
    """Replay the rows' recorded LM requests (``lm_prompts``) through :class:`ProviderCache` in order: prompt tokens,
    the tokens a repeated prefix of an earlier request of the same question serves (``within_question``), those any
    earlier request of the run serves (``servable``; the rest of it, ``across_questions``, is the shared
    instructions / demos prefix), their shares of the prompt tokens, and the provider's measured
    ``cached_prompt_tokens`` / ``prompt_tokens`` when it reported any.  None when no row recorded a prompt."""
    run = ProviderCache()
    total = within = servable = calls = questions = 0
    measured_cached = measured_prompt = 0.0
    for row in rows:
        recorded = [c for c in row.get("lm_prompts") or [] if isinstance(c, dict) and c.get("tokens") is not None]
        measured_cached += float(row.get("cached_prompt_tokens") or 0)
        measured_prompt += float(row.get("prompt_tokens") or 0)
        questions += bool(recorded)
        question = ProviderCache()
        for call in recorded:
            marks = list(call.get("marks") or [])
            total += int(call["tokens"])
            within += question.serve(marks)
            servable += run.serve(marks)
            calls += 1
    if not calls:
        return None

    def share(n: float, d: float) -> float | None:
        return round(n / d, 4) if d else None

    return {"questions": questions, "lm_requests": calls, "prompt_tokens": total, "servable": servable,
            "within_question": within,
            "across_questions": servable - within, "share": share(servable, total),
            "share_within_question": share(within, total), "share_across_questions": share(servable - within, total),
            "measured_share": share(measured_cached, measured_prompt) if measured_cached else None,
            "rule": f"OpenAI: prefix >= {MINIMUM} tokens, in {STEP}-token steps ({SOURCE})", "tokenizer": TOKENIZER}
