"""Answers: generators, the checks of an answer, abstention, and grader calibration."""
