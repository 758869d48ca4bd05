"""The audit settings `reachstore up` fills in from the data folder when the environment
leaves them out: the Ed25519 key pair (made once), the witness file next to the database,
and the HMAC key of older versions when the folder still has one.

Kept in the folder, the private key protects checkpoints from whoever can write the
database but not the folder; the witness file there likewise. README "Audit" says how to
keep both elsewhere.
"""

from __future__ import annotations

from pathlib import Path

from reachstore_server.audit.signing import (
    LEGACY_KEY,
    PUBLIC_KEY,
    PUBLIC_KEY_FILE,
    SIGNING_KEY,
    SIGNING_KEY_FILE,
    private_key_from_env,
    write_key_pair,
)
from reachstore_server.audit.witness import WITNESS_FILE, WITNESS_URL
from reachstore_server.common.kept_secrets import (
    AUDIT_PUBLIC_KEY_FILE,
    AUDIT_SIGNING_KEY_FILE,
    AUDIT_WITNESS_FILE,
    LEGACY_AUDIT_KEY_FILE,
)


def keep_audit_keys(env: dict[str, str], data_dir: Path) -> None:
    """Completes ``env`` in place; raises ConfigError for a key that is set but unusable."""
    if not env.get(SIGNING_KEY) and not env.get(SIGNING_KEY_FILE):
        private = data_dir / AUDIT_SIGNING_KEY_FILE
        if not private.exists():
            write_key_pair(private, data_dir / AUDIT_PUBLIC_KEY_FILE)
        env[SIGNING_KEY_FILE] = str(private)
        if not env.get(PUBLIC_KEY) and not env.get(PUBLIC_KEY_FILE):
            env[PUBLIC_KEY_FILE] = str(data_dir / AUDIT_PUBLIC_KEY_FILE)
    private_key_from_env(env)  # fails before anything starts, naming the setting
    if not env.get(WITNESS_FILE) and not env.get(WITNESS_URL):
        env[WITNESS_FILE] = str(data_dir / AUDIT_WITNESS_FILE)
    legacy = data_dir / LEGACY_AUDIT_KEY_FILE
    if not env.get(LEGACY_KEY) and legacy.is_file():
        env[LEGACY_KEY] = legacy.read_text().strip()
