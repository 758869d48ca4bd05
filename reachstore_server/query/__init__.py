"""The query service: per-namespace in-memory indexes and the search path."""
