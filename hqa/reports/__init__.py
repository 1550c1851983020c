"""Evaluation reports: the seed papers' analyses over run folders, one module per analysis (sources, errors, library,
thoughts, retrieval, selective, divknowqa, sscot), a run's report put together in ``summary``, the paired comparison
in ``compare``, and ``markdown``, the one cell format, table and plot helper they share."""
