"""`reachstore keys create|list|revoke`: API keys managed in the store directly, which is
how the first admin key of a tenant is made (afterwards an admin key can use the API, for
keys no wider than itself). Only here are `auditor` and `internal` keys made, and
deployment service keys (`--service`: `internal` in the reserved tenant `system`, which
ships audit events of every tenant)."""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Engine

from reachstore_server.admin.api.keys import check_key_request
from reachstore_server.audit_client import outbox
from reachstore_server.common.auth import LOCAL_TENANT, SERVICE_TENANT
from reachstore_server.common.config import Settings
from reachstore_server.common.errors import ReachstoreError
from reachstore_server.common.kept_secrets import secret_for
from reachstore_server.common.pii import Masker
from reachstore_server.common.timefmt import rfc3339
from reachstore_server.storage.engine import make_engine, make_sessions
from reachstore_server.storage.keys import KeyRecord, KeyStore
from reachstore_server.storage.schema import SchemaNotAtHead, migrate_to_head


def _fail(message: str) -> None:
    print(f"reachstore: {message}", file=sys.stderr, flush=True)


def _key_store(args: argparse.Namespace) -> tuple[KeyStore, Engine]:
    """The key store of the data folder. Changes made through it are audited like the
    API's: the event goes to the outbox in the same transaction (and from there to the
    audit service with the ingest process's events)."""
    data_dir = Path(args.data_dir).resolve()
    env = {**os.environ, "REACHSTORE_DATA_DIR": str(data_dir)}
    engine = make_engine(Settings.from_env(env).database_url)
    try:
        migrate_to_head(engine)  # keys write to the store: its schema must be at head
    except SchemaNotAtHead as exc:
        _fail(str(exc))
        raise SystemExit(2) from None
    sessions = make_sessions(engine)
    outbox.install(sessions)
    return KeyStore(sessions), engine


@contextlib.contextmanager
def _audited(args: argparse.Namespace, command: str, params: dict[str, object]) -> Iterator[None]:
    """The audit event of a `reachstore keys` change: made by the operating-system user
    at the command line, not by an API key."""
    masker = Masker(secret_for("REACHSTORE_PII_SECRET", Path(args.data_dir).resolve()).encode())
    draft = outbox.Draft(
        tenant=args.tenant,
        caller_key_id="",
        service="admin",
        method=f"cli.keys.{command}",
        params=outbox.summarise({**params, "os_user": getpass.getuser()}, masker),
        trace_id="",
    )
    token = outbox.open_draft(draft)
    try:
        yield
    finally:
        outbox.close_draft(token)


def _key_line(record: KeyRecord) -> str:
    state = "revoked" if record.revoked_at else "active"
    expires = record.expires_at.isoformat() if record.expires_at else "never"
    grants = ",".join(record.namespaces) or "*"
    channels = ",".join(record.channels) or "*"
    groups = f"  groups={','.join(record.groups)}" if record.groups else ""
    return (
        f"{record.key_id}  tenant={record.tenant}  scopes={','.join(record.scopes)}  "
        f"namespaces={grants}  channels={channels}{groups}  expires={expires}  {state}  "
        f"{record.name}"
    )


def _csv(text: str | None) -> list[str]:
    return [part for part in (text or "").split(",") if part]


def _service_key_request(args: argparse.Namespace) -> str | None:
    """Why the tenant and scopes asked for do not fit a deployment service key (or an
    ordinary key in the reserved tenant), or None. ``args`` gets the service key's."""
    if args.service:
        if args.tenant not in (LOCAL_TENANT, SERVICE_TENANT) or args.scopes or args.namespaces:
            return (
                "--service makes the deployment's service key (tenant "
                f"{SERVICE_TENANT!r}, scope internal): leave out --tenant, --scopes and "
                "--namespaces"
            )
        args.tenant, args.scopes = SERVICE_TENANT, "internal"
        return None
    if args.tenant == SERVICE_TENANT:
        return (
            f"tenant {SERVICE_TENANT!r} is reserved for deployment service keys: "
            "make one with --service"
        )
    if not args.scopes:
        return "--scopes is required (comma-separated, e.g. read,write)"
    return None


def cmd_keys_create(args: argparse.Namespace) -> int:
    refusal = _service_key_request(args)
    if refusal is not None:
        _fail(refusal)
        return 2
    try:
        spec = check_key_request(
            args.name,
            _csv(args.scopes),
            _csv(args.namespaces),
            args.ttl_seconds,
            _csv(args.channels),
            _csv(args.groups),
        )
    except ReachstoreError as exc:
        _fail(exc.failure.message)
        return 2
    store, engine = _key_store(args)
    try:
        with _audited(args, "create", {"name": spec.name, "scopes": list(spec.scopes)}):
            record, key = store.create(args.tenant, spec)
    finally:
        engine.dispose()
    if args.json:
        _print_json({"key": _key_json(record), "secret": key})
        return 0
    print(_key_line(record))
    print(f"key (shown once, store it now): {key}")
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    store, engine = _key_store(args)
    try:
        after = None
        found: list[KeyRecord] = []
        while page := store.list(args.tenant, 100, after):
            found += page
            after = page[-1].key_id
    finally:
        engine.dispose()
    if args.json:
        _print_json({"keys": [_key_json(r) for r in found]})
    for record in [] if args.json else found:
        print(_key_line(record))
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    store, engine = _key_store(args)
    try:
        with _audited(args, "revoke", {"key_id": args.key_id}):
            record = store.revoke(args.tenant, args.key_id)
    finally:
        engine.dispose()
    if record is None:
        _fail(f"tenant {args.tenant!r} has no key {args.key_id!r}")
        return 1
    if args.json:
        _print_json({"key": _key_json(record)})
    else:
        print(_key_line(record))
    return 0


def _key_json(record: KeyRecord) -> dict[str, object]:
    """A key as the API shows it (``GET /api/v1/keys``); never its secret digest."""
    return {
        "key_id": record.key_id,
        "tenant": record.tenant,
        "name": record.name,
        "scopes": list(record.scopes),
        "namespaces": list(record.namespaces),
        "channels": list(record.channels),
        "groups": list(record.groups),
        "created_at": rfc3339(record.created_at),
        "expires_at": rfc3339(record.expires_at) if record.expires_at else "",
        "revoked_at": rfc3339(record.revoked_at) if record.revoked_at else "",
    }


def _print_json(value: object) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2))


KEY_COMMANDS = {"create": cmd_keys_create, "list": cmd_keys_list, "revoke": cmd_keys_revoke}


def add_keys_parser(commands: argparse._SubParsersAction) -> None:
    keys = commands.add_parser("keys", help="manage API keys in the store directly")
    actions = keys.add_subparsers(dest="action", required=True)
    for action in ("create", "list", "revoke"):
        sub = actions.add_parser(action)
        sub.add_argument("--data-dir", default="./data", help="the data folder `up` uses")
        sub.add_argument("--tenant", default=LOCAL_TENANT, help="the tenant the key acts for")
        sub.add_argument("--json", action="store_true", help="one JSON document on stdout")
        if action == "create":
            sub.add_argument(
                "--scopes",
                default="",
                help="comma-separated: read,write,admin,reach,operator,auditor,internal",
            )
            sub.add_argument(
                "--service",
                action="store_true",
                help=f"the deployment's service key (tenant {SERVICE_TENANT}, scope internal): "
                "what the services ship audit events of every tenant with",
            )
            sub.add_argument("--namespaces", default="", help="comma-separated name patterns")
            sub.add_argument(
                "--channels", default="", help="comma-separated reach channel patterns"
            )
            sub.add_argument("--groups", default="", help="comma-separated caller groups")
            sub.add_argument("--name", default="", help="a label for people")
            sub.add_argument("--ttl-seconds", type=int, default=0, help="0: never expires")
        if action == "revoke":
            sub.add_argument("key_id")
        sub.set_defaults(
            func={"create": cmd_keys_create, "list": cmd_keys_list, "revoke": cmd_keys_revoke}[
                action
            ]
        )
