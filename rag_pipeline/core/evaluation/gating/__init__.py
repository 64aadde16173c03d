"""Gating: a candidate against the promoted baseline, with significance, policies, reports and JUnit."""
