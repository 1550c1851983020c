"""Loopback stand-ins and local servers for hqa's tests and benchmarks (not part of the installed package).

* :mod:`standins.live` — the live services (MediaWiki, Wikibase, a logging SPARQL pass-through) over a knowledge
  pack, speaking their real response formats;
* :mod:`standins.servers` — free ports, readiness, ``oxigraph serve-read-only`` over a store;
* :mod:`standins.virtuoso` — a throwaway Virtuoso server;
* :mod:`standins.openai_lm` — an OpenAI-compatible LM with a set latency per call, usage with cached prompt tokens,
  replies scripted per hqa program or replayed, 429/500 on demand (benchmarks/bench_throughput.py).

Every server binds to 127.0.0.1 only.  Importable with the repository root on ``sys.path`` (pytest's ``pythonpath``
setting in pyproject.toml; the benchmarks insert it).
"""
