"""Settings are validated once, with messages that name the setting."""

from __future__ import annotations

import pytest

from reachstore_server.common.config import ConfigError, Settings


def test_defaults_give_sqlite_in_the_data_dir(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings.from_env({"REACHSTORE_DATA_DIR": str(tmp_path)})
    assert settings.database_url == f"sqlite:///{tmp_path.resolve() / 'reachstore.db'}"
    assert settings.query_timeout_default_ms <= settings.query_timeout_cap_ms
    assert settings.fault_namespace_delay_ms == {}


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"REACHSTORE_LISTEN": "nohostport"}, "REACHSTORE_LISTEN"),
        ({"REACHSTORE_EMBED_THREADS": "two"}, "REACHSTORE_EMBED_THREADS"),
        ({"REACHSTORE_QUERY_TIMEOUT_DEFAULT_MS": "20000"}, "REACHSTORE_QUERY_TIMEOUT_DEFAULT_MS"),
        ({"REACHSTORE_FAULT_NAMESPACE_DELAY_MS": "slow"}, "REACHSTORE_FAULT_NAMESPACE_DELAY_MS"),
        # A call held for a day waiting for a slot is a queue, not admission.
        ({"REACHSTORE_ADMIT_WAIT_MS": "86400000"}, "REACHSTORE_ADMIT_WAIT_MS must be at most"),
        ({"REACHSTORE_ADMIT_CONCURRENCY": "1000000"}, "REACHSTORE_ADMIT_CONCURRENCY must be at"),
        ({"REACHSTORE_ADMIT_CONCURRENCY": "0"}, "REACHSTORE_ADMIT_CONCURRENCY must be at least"),
        # A query member without the members' shared secret could not sign its forwards.
        ({"REACHSTORE_QUERY_ADVERTISE": "10.0.3.7:50051"}, "REACHSTORE_QUERY_HOP_SECRET must be"),
        (
            {
                "REACHSTORE_QUERY_ADVERTISE": "10.0.3.7:50051",
                "REACHSTORE_QUERY_HOP_SECRET": "short",
            },
            "REACHSTORE_QUERY_HOP_SECRET must be",
        ),
    ],
)
def test_bad_settings_fail_fast_naming_the_setting(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        Settings.from_env(env)


def test_fault_delays_parse_per_namespace() -> None:
    settings = Settings.from_env({"REACHSTORE_FAULT_NAMESPACE_DELAY_MS": "slow=500, slower=900"})
    assert settings.fault_namespace_delay_ms == {"slow": 500, "slower": 900}


def test_ingest_leases_default_to_thirty_seconds_renewed_every_ten() -> None:
    settings = Settings.from_env({})
    assert (settings.ingest_lease_s, settings.ingest_heartbeat_s) == (30.0, 10.0)
    short = Settings.from_env(
        {"REACHSTORE_INGEST_LEASE_S": "2", "REACHSTORE_INGEST_HEARTBEAT_S": "0.5"}
    )
    assert (short.ingest_lease_s, short.ingest_heartbeat_s) == (2.0, 0.5)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REACHSTORE_INGEST_LEASE_S": "soon"}, "REACHSTORE_INGEST_LEASE_S must be a number"),
        ({"REACHSTORE_INGEST_LEASE_S": "0.5"}, "REACHSTORE_INGEST_LEASE_S must be at least 1"),
        ({"REACHSTORE_INGEST_HEARTBEAT_S": "0"}, "REACHSTORE_INGEST_HEARTBEAT_S must be more"),
        (
            {"REACHSTORE_INGEST_LEASE_S": "10", "REACHSTORE_INGEST_HEARTBEAT_S": "6"},
            r"HEARTBEAT_S must be at most half of REACHSTORE_INGEST_LEASE_S \(10\), got 6",
        ),
    ],
)
def test_bad_ingest_lease_settings_are_refused_saying_why(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(env)
