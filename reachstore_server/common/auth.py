"""Authentication and scopes: who a call acts for, and whether it may.

Every service authenticates every call itself (the REST bridge only passes the caller's
header through). A key is ``rsk_<key id>_<secret>``; the id finds the stored key, the
secret is checked against its SHA-256 in constant time. The scope each RPC needs is
declared in the protos (``reachstore.common.v1.required_scope``) and read from the
descriptors, so no handler decides it.

Without required keys (local development) a call that sends no key acts for the local
tenant with the scopes a developer works with (``LOCAL_SCOPES``: not ``auditor``, not
``internal``); a call that sends one is checked all the same. ``docs/SECURITY.md`` says who
may do what with which key.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fnmatch
import hmac
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from google.protobuf.descriptor import ServiceDescriptor

from reachstore.common.v1 import access_pb2
from reachstore_server.common import errors

# read: queries and look-ups; write: namespaces and documents; admin: keys; reach: send
# actions to the outside world; operator: settle actions under review; auditor: read and
# verify every tenant's audit trail; internal: services shipping audit events.
SCOPES = ("read", "write", "admin", "reach", "operator", "auditor", "internal")
# Scopes that reach beyond one tenant's own business: only the operator hands them out,
# with `reachstore keys create`, never a key over the API.
CLI_ONLY_SCOPES = frozenset({"auditor", "internal"})
# The keyless caller of local development: everything a developer does with their own
# tenant. Not `auditor` (other tenants' trails) nor `internal` (writing audit events):
# a web page that reached the bridge must not get them (docs/SECURITY.md).
LOCAL_SCOPES = ("read", "write", "admin", "reach", "operator")
LOCAL_TENANT = "default"
# The reserved tenant of deployment service keys: an `internal` key of this tenant ships
# audit events of every tenant (`reachstore keys create --service`, or minted by `up`).
SERVICE_TENANT = "system"
_KEY_RE = re.compile(r"rsk_([0-9a-f]{16})_([A-Za-z0-9_-]{20,128})")
# Compared against when the key id is unknown, so both failures cost the same work.
_DUMMY_DIGEST = "0" * 64


class StoredKey(Protocol):
    """What authentication needs of a stored key (``reachstore_server.storage.keys.KeyRecord``)."""

    @property
    def tenant(self) -> str: ...
    @property
    def scopes(self) -> tuple[str, ...]: ...
    @property
    def namespaces(self) -> tuple[str, ...]: ...
    @property
    def channels(self) -> tuple[str, ...]: ...
    @property
    def groups(self) -> tuple[str, ...]: ...
    @property
    def expires_at(self) -> dt.datetime | None: ...
    @property
    def revoked_at(self) -> dt.datetime | None: ...
    @property
    def secret_sha256(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class Caller:
    """The identity a call acts for."""

    tenant: str
    key_id: str  # empty for the local, keyless caller
    scopes: frozenset[str]
    namespaces: tuple[str, ...] = ()  # name patterns; empty means every namespace
    channels: tuple[str, ...] = ()  # reach channel patterns; empty means every channel
    groups: tuple[str, ...] = ()  # what channel rules may check as `caller.groups`
    expires_at: dt.datetime | None = None  # aware; None: the key never expires

    @property
    def restricted(self) -> bool:
        """Whether the key has namespace grants or a channel allow-list: it may then see
        only what they cover, and nothing that cannot be shown to be covered."""
        return bool(self.namespaces or self.channels)

    @property
    def is_deployment_service(self) -> bool:
        """A deployment service key: `internal` in the reserved service tenant. It alone
        writes audit events of tenants other than its own."""
        return self.tenant == SERVICE_TENANT and "internal" in self.scopes

    def may_use(self, namespace: str) -> bool:
        """Whether the key's grants cover this namespace."""
        return _granted(namespace, self.namespaces)

    def may_reach(self, channel: str) -> bool:
        """Whether the key's channel allow-list covers this reach channel."""
        return _granted(channel, self.channels)


def _granted(name: str, patterns: tuple[str, ...]) -> bool:
    return not patterns or any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


LOCAL_CALLER = Caller(LOCAL_TENANT, "", frozenset(LOCAL_SCOPES))


def scopes_by_method(services: Iterable[ServiceDescriptor]) -> dict[str, str]:
    """``/pkg.Service/Method`` -> the scope it requires, for every RPC of ``services``."""
    table = {}
    for service in services:
        for method in service.methods:
            scope = method.GetOptions().Extensions[access_pb2.required_scope]
            if scope not in SCOPES:
                raise ValueError(f"{method.full_name} declares no valid required_scope")
            table[f"/{service.full_name}/{method.name}"] = scope
    return table


def _aware(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


class Authenticator:
    def __init__(
        self,
        find_key: Callable[[str], StoredKey | None],
        digest: Callable[[str], str],
        scopes: dict[str, str],
        require_keys: bool,
    ) -> None:
        self._find_key = find_key
        self._digest = digest
        self._scopes = scopes
        self.require_keys = require_keys

    def scope_of(self, method: str) -> str:
        return self._scopes[method]

    def guards(self, method: str) -> bool:
        """Whether the method is one of ours (health and reflection are open to all)."""
        return method in self._scopes

    def authenticate(self, method: str, metadata: Sequence[tuple[str, str | bytes]]) -> Caller:
        """The caller of ``method``, or a ``ReachstoreError`` in the auth category."""
        headers = [value for key, value in metadata if key == "authorization"]
        if headers:
            caller = self._verify(headers[0])
        elif self.require_keys:
            raise errors.ReachstoreError(errors.AUTH_MISSING)
        else:
            caller = LOCAL_CALLER
        needed = self._scopes[method]
        if needed not in caller.scopes:
            raise errors.ReachstoreError(
                errors.AUTH_SCOPE_MISSING,
                f"this call needs the {needed!r} scope",
                structured_data={"required_scope": needed, "key_scopes": sorted(caller.scopes)},
            )
        return caller

    def _verify(self, header: str | bytes) -> Caller:
        text = header.decode("latin-1") if isinstance(header, bytes) else header
        scheme, _, token = text.strip().partition(" ")
        match = _KEY_RE.fullmatch(token.strip()) if scheme.lower() == "bearer" else None
        if match is None:
            raise errors.ReachstoreError(errors.AUTH_MALFORMED)
        key_id, secret = match.groups()
        stored = self._find_key(key_id)
        expected = stored.secret_sha256 if stored is not None else _DUMMY_DIGEST
        if not hmac.compare_digest(self._digest(secret), expected) or stored is None:
            raise errors.ReachstoreError(errors.AUTH_INVALID_KEY)
        # From here on the caller has proved it holds the key: saying why it no longer
        # works helps it and tells an attacker nothing.
        if stored.revoked_at is not None:
            raise errors.ReachstoreError(
                errors.AUTH_KEY_REVOKED, structured_data={"key_id": key_id}
            )
        if stored.expires_at is not None and _aware(stored.expires_at) <= dt.datetime.now(dt.UTC):
            raise errors.ReachstoreError(
                errors.AUTH_KEY_EXPIRED, structured_data={"key_id": key_id}
            )
        return Caller(
            stored.tenant,
            key_id,
            frozenset(stored.scopes),
            tuple(stored.namespaces),
            tuple(stored.channels),
            tuple(stored.groups),
            _aware(stored.expires_at) if stored.expires_at is not None else None,
        )
