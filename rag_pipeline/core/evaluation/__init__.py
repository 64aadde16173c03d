"""Evaluation: golden sets, retrieval, metrics, answers, gates against baselines, experiments, reports."""
