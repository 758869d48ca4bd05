"""API keys: creation (the secret is returned once), lookup for authentication, listing
and revocation. Keys look like ``rsk_<key id>_<secret>``: the id finds the row, the
secret (256 random bits) is checked against its stored SHA-256."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import secrets
from collections.abc import Sequence
from typing import Any

from google.protobuf.descriptor import ServiceDescriptor
from sqlalchemy import Row, bindparam, select, update
from sqlalchemy.orm import Session, sessionmaker

from reachstore_server.common.auth import Authenticator, scopes_by_method
from reachstore_server.storage.engine import single_statement_reads
from reachstore_server.storage.models import ApiKeyRow, utcnow

KEY_PREFIX = "rsk"


@dataclasses.dataclass(frozen=True)
class KeySpec:
    """What a new key may do, checked by ``reachstore_server.admin.api.keys.check_key_spec``."""

    name: str
    scopes: tuple[str, ...]
    namespaces: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    expires_at: dt.datetime | None = None


@dataclasses.dataclass(frozen=True)
class KeyRecord:
    key_id: str
    tenant: str
    name: str
    scopes: tuple[str, ...]
    namespaces: tuple[str, ...]
    created_at: dt.datetime
    expires_at: dt.datetime | None
    revoked_at: dt.datetime | None
    channels: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    secret_sha256: str = dataclasses.field(repr=False, default="")


def _record(row: ApiKeyRow | Row[Any]) -> KeyRecord:
    return KeyRecord(
        row.key_id,
        row.tenant,
        row.name,
        tuple(json.loads(row.scopes_json)),
        tuple(json.loads(row.namespaces_json)),
        row.created_at,
        row.expires_at,
        row.revoked_at,
        tuple(json.loads(row.channels_json)),
        tuple(json.loads(row.groups_json)),
        row.secret_sha256,
    )


_FIND = select(ApiKeyRow.__table__).where(ApiKeyRow.__table__.c.key_id == bindparam("key_id"))


def secret_digest(secret: str) -> str:
    # A fast hash is enough: the secret is 256 random bits, not a password to be guessed.
    return hashlib.sha256(secret.encode()).hexdigest()


def format_key(key_id: str, secret: str) -> str:
    return f"{KEY_PREFIX}_{key_id}_{secret}"


class KeyStore:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions
        self._reads = single_statement_reads(sessions.kw["bind"])

    def create(self, tenant: str, spec: KeySpec) -> tuple[KeyRecord, str]:
        """Stores a new key; returns it and the full key string (shown once)."""
        key_id = secrets.token_hex(8)
        secret = secrets.token_urlsafe(32)
        row = ApiKeyRow(
            key_id=key_id,
            tenant=tenant,
            name=spec.name,
            secret_sha256=secret_digest(secret),
            scopes_json=json.dumps(sorted(set(spec.scopes))),
            namespaces_json=json.dumps(list(spec.namespaces)),
            channels_json=json.dumps(list(spec.channels)),
            groups_json=json.dumps(sorted(set(spec.groups))),
            created_at=utcnow(),
            expires_at=spec.expires_at,
            revoked_at=None,
        )
        with self._sessions.begin() as session:
            session.add(row)
        return _record(row), format_key(key_id, secret)

    def find(self, key_id: str) -> KeyRecord | None:
        """The key with this id, of any tenant: authentication starts from the id alone.
        Every authenticated call of every service comes here, on the caller's event loop:
        one Core statement on a plain connection (through a Session it cost 250 us of CPU
        on SQLite and 450 us on PostgreSQL per call; ``docs/CAPACITY.md``)."""
        with self._reads.connect() as connection:
            row = connection.execute(_FIND, {"key_id": key_id}).first()
        return None if row is None else _record(row)

    def list(self, tenant: str, limit: int, after: str | None) -> list[KeyRecord]:
        with self._sessions() as session:
            stmt = select(ApiKeyRow).where(ApiKeyRow.tenant == tenant)
            if after is not None:
                stmt = stmt.where(ApiKeyRow.key_id > after)
            rows = session.scalars(stmt.order_by(ApiKeyRow.key_id).limit(limit))
            return [_record(r) for r in rows]

    def revoke(self, tenant: str, key_id: str) -> KeyRecord | None:
        """Revokes the tenant's key (idempotent); None when the tenant has no such key."""
        with self._sessions.begin() as session:
            session.execute(
                update(ApiKeyRow)
                .where(
                    ApiKeyRow.tenant == tenant,
                    ApiKeyRow.key_id == key_id,
                    ApiKeyRow.revoked_at.is_(None),
                )
                .values(revoked_at=utcnow())
            )
            row = session.scalar(
                select(ApiKeyRow).where(ApiKeyRow.tenant == tenant, ApiKeyRow.key_id == key_id)
            )
            return None if row is None else _record(row)


def authenticator_for(
    sessions: sessionmaker[Session], services: Sequence[ServiceDescriptor], require_keys: bool
) -> Authenticator:
    """The authenticator a service process uses, reading keys from this store."""
    return Authenticator(
        KeyStore(sessions).find, secret_digest, scopes_by_method(services), require_keys
    )
