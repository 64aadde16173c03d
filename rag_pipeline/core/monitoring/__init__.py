"""Monitoring: production query samples and their drift against the golden set."""
