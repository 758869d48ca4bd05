"""The bridge's Host and Origin checks with configured names, on a real uvicorn: what the
settings add to the loopback names, and what they refuse to add."""

from __future__ import annotations

import httpx
import pytest

from reachstore_server.common.config import ConfigError, Settings
from tests.bridge.conftest import Backend, BridgeFactory


def _settings(backend: Backend, **extra: str) -> Settings:
    env = {
        "REACHSTORE_QUERY_ADDR": backend.address,
        "REACHSTORE_INGEST_ADDR": backend.address,
        "REACHSTORE_REACH_ADDR": backend.address,
        "REACHSTORE_AUDIT_ADDR": backend.address,
        "REACHSTORE_LISTEN": "127.0.0.1:0",
        **extra,
    }
    return Settings.from_env(env)


def test_configured_hosts_and_origins_are_answered_and_no_others(
    backend: Backend, start_bridge: BridgeFactory
) -> None:
    settings = _settings(
        backend,
        REACHSTORE_HTTP_ALLOWED_HOSTS="reachstore.example.com, [2001:db8::5]",
        REACHSTORE_HTTP_ALLOWED_ORIGINS="https://console.example.com",
    )
    bridge = start_bridge(settings)
    with httpx.Client(base_url=bridge.url, timeout=10) as http:
        for host in ("reachstore.example.com", "REACHSTORE.example.com:443", "[2001:db8::5]:8420"):
            assert (
                http.get("/api/v1/namespaces/demo/documents", headers={"Host": host}).status_code
                == 200
            )
        for host in ("example.com", "reachstore.example.com.evil.test", "[2001:db8::6]", ""):
            reply = http.get("/api/v1/namespaces/demo/documents", headers={"Host": host})
            assert reply.status_code == 403, host
            assert reply.json()["error"]["code"] == "HOST_NOT_ALLOWED"
            assert reply.headers["X-Request-Id"] == reply.json()["error"]["request_id"]
        page = {"Host": "reachstore.example.com", "Origin": "https://console.example.com"}
        assert http.get("/api/v1/namespaces/demo/documents", headers=page).status_code == 200
        other = {**page, "Origin": "http://console.example.com"}  # another scheme: another origin
        assert http.get("/api/v1/namespaces/demo/documents", headers=other).json()["error"][
            "code"
        ] == ("ORIGIN_NOT_ALLOWED")
        # The console's files are behind the same checks.
        assert http.get("/console/", headers={"Host": "example.com"}).status_code == 403


def test_without_settings_only_loopback_names_and_the_own_origin_are_answered(
    backend: Backend, start_bridge: BridgeFactory
) -> None:
    bridge = start_bridge(_settings(backend))
    port = bridge.url.rsplit(":", 1)[1]
    with httpx.Client(base_url=bridge.url, timeout=10) as http:
        assert http.get("/api/v1/namespaces/demo/documents").status_code == 200
        assert (
            http.get(
                "/api/v1/namespaces/demo/documents", headers={"Host": "reachstore.local"}
            ).status_code
            == 403
        )
        own = {"Origin": f"http://127.0.0.1:{port}"}
        assert http.get("/api/v1/namespaces/demo/documents", headers=own).status_code == 200
        assert http.get("/readyz", headers={"Host": "10.1.2.3:8420"}).status_code == 200


def test_any_host_needs_keys_and_bad_entries_are_named() -> None:
    with pytest.raises(ConfigError, match="REQUIRE_KEYS"):
        Settings.from_env({"REACHSTORE_HTTP_ALLOWED_HOSTS": "*"})
    assert Settings.from_env(
        {"REACHSTORE_HTTP_ALLOWED_HOSTS": "*", "REACHSTORE_REQUIRE_KEYS": "true"}
    ).http_allowed_hosts == ("*",)
    for bad in ("example.com:8420", "https://example.com", "::1", "*.example.com"):
        with pytest.raises(ConfigError, match="REACHSTORE_HTTP_ALLOWED_HOSTS"):
            Settings.from_env({"REACHSTORE_HTTP_ALLOWED_HOSTS": bad})
    for bad in ("example.com", "ftp://example.com", "https://example.com/app"):
        with pytest.raises(ConfigError, match="REACHSTORE_HTTP_ALLOWED_ORIGINS"):
            Settings.from_env({"REACHSTORE_HTTP_ALLOWED_ORIGINS": bad})
