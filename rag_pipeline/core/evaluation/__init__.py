"""Evaluation: golden sets, metrics, answers, gates against baselines, experiments, reports."""
