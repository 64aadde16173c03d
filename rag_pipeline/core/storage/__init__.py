"""Storage: the only place with SQL."""
