"""KeyService: an admin manages the API keys of their own tenant. A key made here holds
no more than the key making it (``key_bounds.py``)."""

from __future__ import annotations

import asyncio
import datetime as dt

import grpc

from reachstore.admin.v1 import key_service_pb2 as pb
from reachstore.admin.v1 import key_service_pb2_grpc as pb_grpc
from reachstore_server.admin.api.key_bounds import bounded, manages
from reachstore_server.common import errors, names, paging
from reachstore_server.common.auth import SCOPES, Caller
from reachstore_server.common.identity import caller
from reachstore_server.common.timefmt import rfc3339
from reachstore_server.storage.keys import KeyRecord, KeySpec, KeyStore

MAX_NAME = 128
MAX_PATTERNS = 64
MAX_SCOPES = 16
# A lifetime beyond this is no lifetime at all (and would overflow the clock): 100 years.
MAX_TTL_SECONDS = 100 * 365 * 24 * 3600


def key_to_pb(record: KeyRecord) -> pb.ApiKey:
    return pb.ApiKey(
        key_id=record.key_id,
        tenant=record.tenant,
        name=record.name,
        scopes=record.scopes,
        namespaces=record.namespaces,
        channels=record.channels,
        groups=record.groups,
        created_at=rfc3339(record.created_at),
        expires_at=rfc3339(record.expires_at) if record.expires_at else "",
        revoked_at=rfc3339(record.revoked_at) if record.revoked_at else "",
    )


def _caller_to_pb(who: Caller) -> pb.ApiKey:
    return pb.ApiKey(
        key_id=who.key_id,
        tenant=who.tenant,
        scopes=sorted(who.scopes),
        namespaces=who.namespaces,
        channels=who.channels,
        groups=who.groups,
        expires_at=rfc3339(who.expires_at) if who.expires_at else "",
    )


def check_key_request(
    name: str,
    scopes: list[str],
    namespaces: list[str],
    ttl_seconds: int,
    channels: list[str] = [],  # noqa: B006 - never mutated
    groups: list[str] = [],  # noqa: B006 - never mutated
) -> KeySpec:
    """Validates what a new key asks for. Shared with the CLI."""
    if len(name) > MAX_NAME:
        raise errors.invalid("name", f"at most {MAX_NAME} characters")
    names.check_count(scopes, "scopes", MAX_SCOPES)
    if not scopes or any(s not in SCOPES for s in scopes):
        raise errors.invalid("scopes", f"one or more of {', '.join(SCOPES)}", allowed=list(SCOPES))
    names.check_count(namespaces, "namespaces", MAX_PATTERNS, "patterns")
    for i, pattern in enumerate(namespaces):
        if not names.is_namespace_name(pattern.replace("*", "a").replace("?", "a")):
            raise errors.invalid(
                f"namespaces[{i}]",
                f"must be a namespace name ({names.NAMESPACE_RULE}) "
                "where * and ? stand for any characters",
            )
    _check_names("channels", channels, "a channel name", allow_wildcards=True)
    _check_names("groups", groups, "a group name", allow_wildcards=False)
    if not 0 <= ttl_seconds <= MAX_TTL_SECONDS:
        raise errors.invalid(
            "ttl_seconds",
            f"0 (no expiry) to {MAX_TTL_SECONDS} seconds",
            limit=MAX_TTL_SECONDS,
            actual=ttl_seconds,
        )
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=ttl_seconds) if ttl_seconds else None
    return KeySpec(name, tuple(scopes), tuple(namespaces), tuple(channels), tuple(groups), expires)


def _check_names(field: str, values: list[str], what: str, allow_wildcards: bool) -> None:
    names.check_count(values, field, MAX_PATTERNS)
    for i, value in enumerate(values):
        plain = value.replace("*", "a").replace("?", "a") if allow_wildcards else value
        if not names.is_namespace_name(plain):
            wildcards = " where * and ? stand for any characters" if allow_wildcards else ""
            raise errors.invalid(
                f"{field}[{i}]", f"must be {what} ({names.NAMESPACE_RULE}){wildcards}"
            )


class KeyServicer(pb_grpc.KeyServiceServicer):
    def __init__(self, keys: KeyStore) -> None:
        self._keys = keys

    async def CreateKey(
        self, request: pb.CreateKeyRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateKeyResponse:
        who = caller(context)
        asked = check_key_request(
            request.name,
            list(request.scopes),
            list(request.namespaces),
            request.ttl_seconds,
            list(request.channels),
            list(request.groups),
        )
        spec = bounded(asked, who, dt.datetime.now(dt.UTC))
        record, secret = await asyncio.to_thread(self._keys.create, who.tenant, spec)
        return pb.CreateKeyResponse(key=key_to_pb(record), secret=secret)

    async def ListKeys(
        self, request: pb.ListKeysRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListKeysResponse:
        who = caller(context)
        size = names.page_size(request.page_size)
        after = paging.decode_token(request.page_token)
        rows = await asyncio.to_thread(self._keys.list, who.tenant, size + 1, after)
        page = rows[:size]
        token = paging.encode_token(page[-1].key_id) if len(rows) > size else ""
        # Keys outside a restricted key's grants are left out, so a page may come back short.
        shown = [key_to_pb(r) for r in page if manages(who, r)]
        return pb.ListKeysResponse(keys=shown, next_page_token=token)

    async def GetCurrentKey(
        self, request: pb.GetCurrentKeyRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCurrentKeyResponse:
        who = caller(context)
        record = await asyncio.to_thread(self._keys.find, who.key_id) if who.key_id else None
        if record is None:  # the keyless local caller: no stored key to show
            return pb.GetCurrentKeyResponse(key=_caller_to_pb(who))
        return pb.GetCurrentKeyResponse(key=key_to_pb(record))

    async def RevokeKey(
        self, request: pb.RevokeKeyRequest, context: grpc.aio.ServicerContext
    ) -> pb.RevokeKeyResponse:
        who = caller(context)
        # Looked up first, for every key: one outside the caller's grants is not found,
        # after the same work as one that does not exist.
        found = await asyncio.to_thread(self._keys.find, request.key_id)
        record = None
        if found is not None and manages(who, found):
            record = await asyncio.to_thread(self._keys.revoke, who.tenant, request.key_id)
        if record is None:
            raise errors.ReachstoreError(
                errors.KEY_NOT_FOUND, structured_data={"key_id": request.key_id[:64]}
            )
        return pb.RevokeKeyResponse(key=key_to_pb(record))
