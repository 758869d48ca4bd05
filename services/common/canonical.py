"""Canonical JSON: the one text of an audit event that the outbox bounds and stores
(``services/audit_client/outbox.py``) and the audit service hashes
(``services/audit/chain.py``). Both sides use this function, so neither imports the other."""

from __future__ import annotations

import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
