"""Answers as scored: the metrics shared by evaluation, reports and optimizers, and the one answer clean-up."""
