"""Evaluation reports: the seed papers' analyses over run folders."""
