"""Shard settings that cannot work, checked where every process reads them
(reachstore_server/common/config.py ``Settings.from_env``): settings are "validated once,
with messages that name the setting" (tests/unit/test_config.py).

``REACHSTORE_QUERY_ADVERTISE`` is "host:port the other query processes reach this one at"
(docs/SHARDS.md). A wildcard listen address is not one: dialled by another member,
0.0.0.0 or [::] reaches that member's own host, in Kubernetes (one port for every pod)
that member itself. Port 0 is reachable by nobody, a host with a space is no host name, and
the members table holds at most 255 characters of address
(reachstore_server/storage/models.py ``QueryMemberRow.address``): a longer one is accepted
here and then fails the first heartbeat with a database error naming no setting.

A lease shorter than a heartbeat's round trip makes live members delete each other
(tests/e2e/test_attack18s_lease_config.py shows it with processes).
"""

from __future__ import annotations

import pytest

from reachstore_server.common.config import ConfigError, Settings


@pytest.mark.parametrize(
    ("value"),
    [
        "0.0.0.0:50051",
        "[::]:50051",
        "10.0.3.7:0",
        "query one:50051",
        "h" * 300 + ":50051",
    ],
    ids=["wildcard-v4", "wildcard-v6", "port-0", "space-in-host", "longer-than-the-column"],
)
def test_an_advertised_address_no_member_can_dial_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="REACHSTORE_QUERY_ADVERTISE"):
        Settings.from_env({"REACHSTORE_QUERY_ADVERTISE": value})


@pytest.mark.parametrize("value", ["0.001", "0.01"])
def test_a_member_lease_shorter_than_a_heartbeat_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="REACHSTORE_QUERY_MEMBER_LEASE_S"):
        Settings.from_env({"REACHSTORE_QUERY_MEMBER_LEASE_S": value})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("REACHSTORE_QUERY_REPLICAS", "0"),
        ("REACHSTORE_QUERY_REPLICAS", "-1"),
        ("REACHSTORE_QUERY_REPLICAS", "two"),
        ("REACHSTORE_QUERY_MEMBER_LEASE_S", "0"),
        ("REACHSTORE_QUERY_MEMBER_LEASE_S", "-5"),
        ("REACHSTORE_QUERY_MEMBER_LEASE_S", "nan"),
        ("REACHSTORE_QUERY_ADVERTISE", "garbage"),
        ("REACHSTORE_QUERY_ADVERTISE", "host:99999"),
    ],
)
def test_plainly_bad_shard_values_are_refused_naming_the_setting(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: value})
