"""The error a bad setting raises, in a module of its own so that every settings module
(``config.py``, ``limits.py``) can raise it without importing the others, and how a
service refuses to start on one."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import NoReturn


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names it."""


def refuse_to_start(component: str, reason: object) -> NoReturn:
    """Exit status 2 with one line on stderr: what an operator's mistake gets instead of a
    traceback (a bad setting here, an old schema in ``reachstore_server/storage/schema.py``)."""
    print(f"reachstore {component}: refusing to start: {reason}", file=sys.stderr, flush=True)
    raise SystemExit(2)


@contextlib.contextmanager
def refusing_to_start(component: str) -> Iterator[None]:
    """Around a service's ``main`` (usable as a decorator): a ``ConfigError`` from reading
    its settings, secrets or files ends the process with ``refuse_to_start``."""
    try:
        yield
    except ConfigError as exc:
        refuse_to_start(component, exc)
