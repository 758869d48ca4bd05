"""`reachstore audit verify|list|outbox`: the audit trail read straight from the database.

No service has to run: an auditor can check the chains of a stopped system, or of a copy
of its database, with the data folder (or REACHSTORE_DATABASE_URL), the audit public key
and the witnesses. The public key is ``--public-key``, else the one the environment sets
(``reachstore_server/audit/signing.py``), else the one `reachstore up` keeps in the data folder,
with a warning: whoever can write the folder can replace that one (the witnesses' lines,
signed with the real key, then fail). The witnesses are ``--witness-file`` and
``--witness-url``, else REACHSTORE_AUDIT_WITNESS_FILE/URL, else the witness file `up`
keeps in the folder. Nothing is ever made here: a new key would make every checkpoint
look forged.

Exit codes are for scripts: 0 every chain verifies, 1 a chain or a witness is broken, 2
the command could not check anything (bad flags, no key, no database, a witness that
cannot be read).

`audit outbox` shows the events still in the outbox, and the ones the audit service
refused and the shipper set aside, with the reason; ``--release`` hands set-aside rows back
to the shipper (once whatever refused them is fixed).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx
from sqlalchemy import inspect, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from reachstore_server.audit import signing
from reachstore_server.audit.chain import HASHED_FIELDS
from reachstore_server.audit.store import AuditStore
from reachstore_server.audit.verify import Report
from reachstore_server.audit.verify_settings import (
    CADENCE_GRACE,
    WITNESS_BROKEN,
    Verifier,
    cadence_from_env,
)
from reachstore_server.audit.witness import (
    WITNESS_FILE,
    WITNESS_URL,
    FileWitness,
    Witness,
    WitnessRead,
    witnesses_from_env,
)
from reachstore_server.audit_client.outbox_metrics import outbox_counts
from reachstore_server.common.config import ConfigError, Settings
from reachstore_server.common.kept_secrets import (
    AUDIT_PUBLIC_KEY_FILE,
    AUDIT_WITNESS_FILE,
)
from reachstore_server.common.timefmt import rfc3339
from reachstore_server.storage.audit_models import AuditEventRow, AuditOutboxRow
from reachstore_server.storage.engine import make_engine, make_sessions

DEFAULT_LIST_LIMIT = 20

T = TypeVar("T")


def _fail(message: str) -> None:
    print(f"reachstore: {message}", file=sys.stderr, flush=True)


def _env_with_folder(data_dir: Path, args: argparse.Namespace) -> dict[str, str]:
    """The environment, completed from the flags and then from the data folder."""
    env = dict(os.environ)
    if args.public_key:
        env.pop(signing.PUBLIC_KEY, None)
        env[signing.PUBLIC_KEY_FILE] = args.public_key
    elif not any(
        env.get(v)
        for v in (
            signing.PUBLIC_KEY,
            signing.PUBLIC_KEY_FILE,
            signing.SIGNING_KEY,
            signing.SIGNING_KEY_FILE,
        )
    ):
        kept = data_dir / AUDIT_PUBLIC_KEY_FILE
        if not kept.is_file():
            raise ConfigError(
                f"no audit public key: pass --public-key, set {signing.PUBLIC_KEY_FILE}, or "
                f"keep it in {kept} (`reachstore up` writes it there)"
            )
        _fail(
            f"warning: the public key is the one kept in {kept}: whoever can write the data "
            "folder can replace it; pass --public-key with a copy kept elsewhere"
        )
        env[signing.PUBLIC_KEY_FILE] = str(kept)
    # The HMAC key of older checkpoints is never taken from the folder: whoever can write
    # the folder could have put one there and signed what they liked with it. It counts
    # only when the operator gives it (REACHSTORE_AUDIT_KEY).
    if args.witness_file or args.witness_url:
        env[WITNESS_FILE] = ",".join(args.witness_file or [])
        env[WITNESS_URL] = ",".join(args.witness_url or [])
    elif not env.get(WITNESS_FILE) and not env.get(WITNESS_URL):
        kept_witness = data_dir / AUDIT_WITNESS_FILE
        if kept_witness.is_file():
            env[WITNESS_FILE] = str(kept_witness)
    return env


def _verifier(data_dir: Path, args: argparse.Namespace) -> Verifier:
    env = _env_with_folder(data_dir, args)
    public = signing.public_key_from_env(env)
    assert public is not None
    legacy = signing.legacy_key_from_env(env)
    files = [f for f in env.get(WITNESS_FILE, "").split(",") if f]
    witnesses: list[Witness] = [FileWitness(Path(f)) for f in files]
    witnesses += witnesses_from_env({WITNESS_URL: env.get(WITNESS_URL, "")})
    for witness in witnesses:
        if isinstance(witness, FileWitness) and not witness.path.is_file():
            raise ConfigError(f"no witness file at {witness.path}")
    interval = args.checkpoint_s or Settings.from_env(env).audit_checkpoint_s
    cadence = None
    if not args.no_cadence:
        grace = (
            {CADENCE_GRACE: str(args.cadence_grace_s)} if args.cadence_grace_s is not None else {}
        )
        cadence = cadence_from_env({**env, **grace}, interval)
    return Verifier(signing.CheckpointKeys(public, legacy), witnesses, cadence)


def _read(data_dir: Path, read: Callable[[sessionmaker[Session]], T]) -> T:
    """Runs ``read`` against the store of the data folder; every way of not getting there
    becomes a ConfigError. A missing SQLite file is reported rather than created, so a
    mistyped --data-dir does not verify an empty trail as "ok"."""
    env = {**os.environ, "REACHSTORE_DATA_DIR": str(data_dir)}
    url = Settings.from_env(env).database_url
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database or "")
        if not path.is_file():
            raise ConfigError(
                f"no database at {path}: is --data-dir the folder `reachstore up` uses?"
            )
    engine = make_engine(url)
    try:
        if not inspect(engine).has_table(AuditEventRow.__tablename__):
            raise ConfigError(
                f"the database {parsed.render_as_string(hide_password=True)} has no audit tables"
            )
        return read(make_sessions(engine))
    except SQLAlchemyError as exc:
        cause = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        raise ConfigError(f"cannot read the audit trail: {cause[0] if cause else exc}") from None
    finally:
        engine.dispose()


def _printable(text: str) -> str:
    """Text from the database (caller-supplied idempotency keys, or anything a tamperer
    wrote) without control characters that could rewrite the terminal line."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


# --- verify ---------------------------------------------------------------------------------


def _verify_all(
    sessions: sessionmaker[Session],
    verifier: Verifier,
    reads: Sequence[WitnessRead],
    tenant: str | None,
) -> list[tuple[str, Report]]:
    """Every chain asked for, each to its end: one broken tenant does not hide another."""
    store = AuditStore(sessions)
    tenants = [tenant] if tenant else verifier.every_tenant(store, reads)
    return verifier.verify(store, tenants, reads=reads)


def _witness_line(read: WitnessRead) -> str:
    if read.broken is None:
        return f"witness {read.name}: {_count(len(read.heads), 'head')}: ok"
    b = read.broken
    return f"witness {read.name}: {WITNESS_BROKEN} at line {b.line}: {b.detail}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _verify_line(tenant: str, report: Report) -> str:
    if report.first_break is None and report.events_checked == report.checkpoints_checked == 0:
        return f"{tenant}: no events or checkpoints: nothing to verify"
    counted = (
        f"{_count(report.events_checked, 'event')}, "
        f"{_count(report.checkpoints_checked, 'checkpoint')} checked"
    )
    found = report.first_break
    if found is None:
        return f"{tenant}: {counted}: ok"
    event = f" (event {found.event_id})" if found.event_id else ""
    return f"{tenant}: {counted}: {found.kind} at position {found.seq}{event}: {found.detail}"


def _verify_json(results: Sequence[tuple[str, Report]]) -> dict[str, Any]:
    tenants = [
        {
            "tenant": tenant,
            "ok": report.first_break is None,
            "events_checked": report.events_checked,
            "checkpoints_checked": report.checkpoints_checked,
            "first_break": dataclasses.asdict(report.first_break) if report.first_break else None,
        }
        for tenant, report in results
    ]
    return {
        "ok": all(t["ok"] for t in tenants),
        "tenants_checked": len(tenants),
        "events_checked": sum(r.events_checked for _, r in results),
        "checkpoints_checked": sum(r.checkpoints_checked for _, r in results),
        "tenants": tenants,
    }


def cmd_audit_verify(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).resolve()
    try:
        verifier = _verifier(data_dir, args)
        try:
            reads = verifier.read_witnesses()
        except (OSError, httpx.HTTPError) as exc:
            raise ConfigError(f"cannot read a witness: {exc}") from None
        results = _read(
            data_dir, lambda sessions: _verify_all(sessions, verifier, reads, args.tenant)
        )
    except ConfigError as exc:
        _fail(str(exc))
        return 2
    broken = [tenant for tenant, report in results if report.first_break is not None]
    bad_witnesses = [r.name for r in reads if r.broken is not None]
    if args.json:
        body = _verify_json(results)
        body["witnesses"] = [
            {
                "witness": r.name,
                "ok": r.broken is None,
                "heads": len(r.heads),
                "broken": dataclasses.asdict(r.broken) if r.broken else None,
            }
            for r in reads
        ]
        body["ok"] = body["ok"] and not bad_witnesses
        print(json.dumps(body, ensure_ascii=False))
    else:
        # What a break names (ids, times) comes from the very rows that were tampered with:
        # control characters in it must not be able to rewrite the line on a terminal.
        for read in reads:
            print(_printable(_witness_line(read)))
        if not reads:
            print("no witness: checked against the database's own checkpoints only")
        if not results:
            print("no audit events in the database: nothing to verify")
        for tenant, report in results:
            print(_printable(_verify_line(tenant, report)))
        if broken or bad_witnesses:
            names = _printable(", ".join(broken))
            print(
                f"BROKEN: {len(broken)} of {len(results)} tenants: {names}"
                + (f"; {len(bad_witnesses)} witness(es) broken" if bad_witnesses else "")
            )
        elif results:
            print(f"ok: {_count(len(results), 'tenant')} verified")
    return 1 if broken or bad_witnesses else 0


# --- list -----------------------------------------------------------------------------------


def _latest(sessions: sessionmaker[Session], tenant: str | None, limit: int) -> list[AuditEventRow]:
    """The last ``limit`` events appended (of one tenant, or of all), oldest first as in a
    log. Across tenants the order is the order of appending (the row id): times are stored
    as the services sent them and need not sort as text."""
    stmt = select(AuditEventRow)
    if tenant:
        stmt = stmt.where(AuditEventRow.tenant == tenant).order_by(AuditEventRow.seq.desc())
    else:
        stmt = stmt.order_by(AuditEventRow.id.desc())
    with sessions() as session:
        rows = list(session.scalars(stmt.limit(limit)))
    rows.reverse()
    return rows


def _event_json(row: AuditEventRow) -> dict[str, Any]:
    """The stored fields exactly as hashed, plus position and hash, so that a script can
    recompute the chain on its own."""
    return {
        "seq": row.seq,
        **{name: getattr(row, name) for name in HASHED_FIELDS},
        "hash": row.hash,
    }


def _event_table(rows: Sequence[AuditEventRow], with_tenant: bool) -> list[str]:
    header = ["SEQ", "TIME", "SERVICE", "METHOD", "CALLER", "RESULT", "IDEMPOTENCY KEY"]
    table = [(["TENANT"] if with_tenant else []) + header]
    for row in rows:
        result = f"{row.result_status} {row.error_code}" if row.error_code else row.result_status
        cells = [
            str(row.seq),
            row.time,
            row.service,
            row.method,
            row.caller_key_id or "-",
            result,
            row.idempotency_key or "-",
        ]
        table.append([_printable(c) for c in ([row.tenant] if with_tenant else []) + cells])
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in table
    ]


def cmd_audit_list(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).resolve()
    try:
        rows = _read(data_dir, lambda sessions: _latest(sessions, args.tenant, args.limit))
    except ConfigError as exc:
        _fail(str(exc))
        return 2
    if args.json:
        print(json.dumps({"events": [_event_json(r) for r in rows]}, ensure_ascii=False))
    elif not rows:
        print("no audit events")
    else:
        print("\n".join(_event_table(rows, with_tenant=not args.tenant)))
    return 0


# --- outbox ---------------------------------------------------------------------------------


def _set_aside(sessions: sessionmaker[Session]) -> list[AuditOutboxRow]:
    with sessions() as session:
        return list(
            session.scalars(
                select(AuditOutboxRow)
                .where(AuditOutboxRow.quarantined_at.is_not(None))
                .order_by(AuditOutboxRow.id)
            )
        )


def _release(sessions: sessionmaker[Session], ids: list[int] | None) -> int:
    """Hands set-aside rows (all of them when ``ids`` is None) back to the shipper."""
    stmt = update(AuditOutboxRow).where(AuditOutboxRow.quarantined_at.is_not(None))
    if ids is not None:
        stmt = stmt.where(AuditOutboxRow.id.in_(ids))
    with sessions.begin() as session:
        result = session.execute(stmt.values(quarantined_at=None, refusal=None))
        return int(result.rowcount)  # type: ignore[attr-defined]


def _row_json(row: AuditOutboxRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "service": row.service,
        "set_aside_at": rfc3339(dt.datetime.fromtimestamp(row.quarantined_at or 0, dt.UTC)),
        "attempts": row.attempts,
        "refusal": row.refusal or "",
        "event_chars": len(row.event_json),
    }


def cmd_audit_outbox(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).resolve()
    ids = None if args.release_all else args.release

    def read(sessions: sessionmaker[Session]) -> tuple[int, Any, list[AuditOutboxRow]]:
        released = _release(sessions, ids) if (ids or args.release_all) else 0
        return released, outbox_counts(sessions), _set_aside(sessions)

    try:
        released, counts, rows = _read(data_dir, read)
    except ConfigError as exc:
        _fail(str(exc))
        return 2
    if args.json:
        listed = [{"service": s, "state": k, "events": n} for (s, k), n in sorted(counts.items())]
        body = {"released": released, "counts": listed, "set_aside": [_row_json(r) for r in rows]}
        print(json.dumps(body, ensure_ascii=False))
        return 0
    if released:
        print(f"released {_count(released, 'event')} to the shipper")
    if not counts:
        print("the outbox is empty")
    for (service, state), n in sorted(counts.items()):
        print(f"{service}: {_count(n, 'event')} {state}")
    for row in rows:
        item = _row_json(row)
        print(
            _printable(
                f"set aside #{item['id']} ({item['service']}, {item['set_aside_at']}): "
                f"{item['refusal']}"
            )
        )
    return 0


def cmd_audit_keygen(args: argparse.Namespace) -> int:
    try:
        key = signing.write_key_pair(Path(args.private), Path(args.public))
    except FileExistsError:
        _fail(f"{args.private} exists: a key is never overwritten")
        return 2
    except OSError as exc:
        _fail(f"cannot write the key pair: {exc}")
        return 2
    print(f"wrote {args.private} and {args.public} ({key.key_id})")
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a whole number of 1 or more, got {text!r}")
    return value


def add_audit_parser(commands: argparse._SubParsersAction) -> None:
    audit = commands.add_parser("audit", help="verify and read the audit trail in the store")
    actions = audit.add_subparsers(dest="action", required=True)
    verify = actions.add_parser(
        "verify",
        help="check every event's hash and link and every signed checkpoint; "
        "exit 0 ok, 1 broken, 2 could not check",
    )
    listing = actions.add_parser("list", help="the latest events, oldest first")
    for sub in (verify, listing):
        sub.add_argument("--data-dir", default="./data", help="the data folder `up` uses")
        sub.add_argument("--tenant", default=None, help="one tenant (default: every tenant)")
        sub.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    listing.add_argument(
        "--limit", type=_positive, default=DEFAULT_LIST_LIMIT, help="how many events"
    )
    verify.add_argument(
        "--public-key", default=None, help="the audit public key (PEM), kept apart from the data"
    )
    verify.add_argument(
        "--witness-file", action="append", help="a witness file to check against (repeatable)"
    )
    verify.add_argument(
        "--witness-url", action="append", help="an HTTP witness to check against (repeatable)"
    )
    verify.add_argument(
        "--checkpoint-s",
        type=_positive,
        default=None,
        help="the checkpoint interval the audit service runs with "
        "(default: REACHSTORE_AUDIT_CHECKPOINT_S)",
    )
    verify.add_argument(
        "--cadence-grace-s",
        type=float,
        default=None,
        help="how late a due checkpoint may be (default: REACHSTORE_AUDIT_CADENCE_GRACE_S, 300)",
    )
    verify.add_argument(
        "--no-cadence", action="store_true", help="do not check that checkpoints came on time"
    )
    keygen = actions.add_parser(
        "keygen", help="write a new Ed25519 key pair for signing checkpoints"
    )
    keygen.add_argument("--private", required=True, help="where the private key goes (0600)")
    keygen.add_argument("--public", required=True, help="where the public key goes")
    keygen.set_defaults(func=cmd_audit_keygen)
    verify.set_defaults(func=cmd_audit_verify)
    listing.set_defaults(func=cmd_audit_list)
    waiting = actions.add_parser(
        "outbox", help="events waiting to be shipped, and those the audit service refused"
    )
    waiting.add_argument("--data-dir", default="./data", help="the data folder `up` uses")
    waiting.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    release = waiting.add_mutually_exclusive_group()
    release.add_argument(
        "--release",
        type=_positive,
        action="append",
        metavar="ID",
        help="hand this set-aside row back to the shipper (repeatable)",
    )
    release.add_argument("--release-all", action="store_true", help="hand every set-aside row back")
    waiting.set_defaults(func=cmd_audit_outbox)
