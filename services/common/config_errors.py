"""The error a bad setting raises, in a module of its own so that every settings module
(``config.py``, ``limits.py``) can raise it without importing the others."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names it."""
