"""Answers as scored: the metrics shared by evaluation, reports and optimizers, the one answer clean-up, and the
reports' correctness rule with the statistics of a paired comparison (``stats``)."""
