"""Reach, audit, key and search-merge conversions: protobuf -> models with lowercase words,
absent things as None, and the merge of a retried partial answer."""

from __future__ import annotations

import pytest
from sdk_support import Category, failure_pb

from reachstore import (
    AuditEvent,
    ChainBreak,
    CreatedKey,
    Failure,
    QueryMeta,
    SearchRequest,
    SearchResponse,
    SearchResult,
    _convert,
    _convert_audit,
    _convert_reach,
    _merge,
)
from reachstore.admin.v1 import key_service_pb2 as key_pb2
from reachstore.audit.v1 import audit_service_pb2 as audit_pb2
from reachstore.reach.v1 import reach_service_pb2 as reach_pb2


def test_an_action_reads_with_its_failure_resolution_receipts_and_history() -> None:
    action = reach_pb2.Action(
        action_id="a1",
        state=reach_pb2.ACTION_STATE_FAILED,
        requirement=reach_pb2.REQUIREMENT_OPTIONAL,
        failure=failure_pb(
            "RECEIVER_REJECTED", Category.CATEGORY_PERMANENT, data={"status": 422}, action_id="a1"
        ),
        failure_kind=reach_pb2.FAILURE_KIND_BUSINESS,
        resolution=reach_pb2.ActionResolution(
            outcome=reach_pb2.RESOLUTION_FAILED, note="checked", resolved_by="k1"
        ),
        receipts=[reach_pb2.Receipt(attempt=1, operation="submit", status_code=422)],
        history=[
            reach_pb2.HistoryEntry(
                from_state=reach_pb2.ACTION_STATE_SUBMITTING,
                to_state=reach_pb2.ACTION_STATE_FAILED,
                reason="receiver_rejected",
            )
        ],
    )
    model = _convert_reach.action_from_pb(action)
    assert (model.state, model.requirement, model.failure_kind, model.final) == (
        "failed",
        "optional",
        "business",
        True,
    )
    assert model.failure is not None and model.failure["structured_data"] == {"status": 422}
    assert model.resolution is not None and model.resolution.outcome == "failed"
    assert model.receipts[0].status_code == 422
    assert (model.history[0].from_state, model.history[0].to_state) == ("submitting", "failed")

    bare = _convert_reach.action_from_pb(reach_pb2.Action(state=reach_pb2.ACTION_STATE_READY))
    assert (bare.failure, bare.resolution, bare.requirement, bare.failure_kind) == (
        None,
        None,
        "required",
        "unspecified",
    )


def test_a_verification_has_a_break_only_when_one_was_found() -> None:
    ok = _convert_audit.verify_result_from_pb(audit_pb2.VerifyResponse(ok=True, events_checked=9))
    assert (ok.ok, ok.first_break, ok.events_checked) == (True, None, 9)
    broken = _convert_audit.verify_result_from_pb(
        audit_pb2.VerifyResponse(
            first_break=audit_pb2.ChainBreak(
                kind=audit_pb2.BREAK_KIND_FORGED_CHECKPOINT, tenant="acme", seq=4
            )
        )
    )
    assert broken.first_break == ChainBreak("forged_checkpoint", "acme", 4, "", "")


def test_a_chain_without_a_checkpoint_has_none() -> None:
    assert _convert_audit.checkpoint_from_pb(audit_pb2.GetCheckpointResponse()) is None
    found = _convert_audit.checkpoint_from_pb(
        audit_pb2.GetCheckpointResponse(checkpoint=audit_pb2.Checkpoint(tenant="t", seq=3))
    )
    assert found is not None and (found.tenant, found.seq) == ("t", 3)


def test_events_round_trip_except_their_place_in_the_chain() -> None:
    event = AuditEvent(
        "e1", method="SubmitTask", params={"n": 1}, category="quota", seq=5, hash="h"
    )
    sent = _convert_audit.event_to_pb(event)
    assert (sent.seq, sent.hash, sent.category) == (0, "", Category.CATEGORY_QUOTA)
    back = _convert_audit.event_from_pb(sent)
    assert back.params == {"n": 1} and back.category == "quota" and back.method == "SubmitTask"
    with pytest.raises(ValueError, match="category"):
        _convert_audit.event_to_pb(AuditEvent("e2", category="bad"))


def test_a_new_keys_secret_stays_out_of_its_repr() -> None:
    key = _convert.api_key_from_pb(key_pb2.ApiKey(key_id="k1", scopes=["read"]))
    created = CreatedKey(key=key, secret="rsk_k1_secret")
    assert "rsk_k1_secret" not in repr(created) and created.secret == "rsk_k1_secret"
    assert key.scopes == ["read"] and not key.revoked


def _failure(namespace: str, retryable: bool, code: str = "NAMESPACE_TIMEOUT") -> Failure:
    return Failure(
        category="timeout" if retryable else "permanent",
        error_code=code,
        message="",
        retryable=retryable,
        retry_after_ms=1000 if retryable else None,
        namespace=namespace,
    )


def _result(namespace: str, score: float, text: str) -> SearchResult:
    return SearchResult(namespace, f"{namespace}-doc", 0, text, score)


def test_a_retried_answer_is_merged_as_one_search_over_every_namespace() -> None:
    first = SearchResponse(
        results=[_result("a", 0.9, "alpha"), _result("a", 0.5, "shared")],
        meta=QueryMeta(
            1 / 3, ["a", "slow", "nope"], ["a"], [_failure("slow", True), _failure("nope", False)]
        ),
        request=SearchRequest(["a", "slow", "nope"], "q", top_k=3),
    )
    again = SearchResponse(
        results=[_result("slow", 0.7, "beta"), _result("slow", 0.6, "shared")],
        meta=QueryMeta(1.0, ["slow"], ["slow"], []),
    )
    assert _merge.retryable_namespaces(first) == ["slow"]

    merged = _merge.merge(first, again, 3)

    assert [(r.namespace, r.text) for r in merged.results] == [
        ("a", "alpha"),
        ("slow", "beta"),
        ("slow", "shared"),  # the same text from "a" ranks lower and is dropped
    ]
    assert merged.meta.namespaces_succeeded == ["a", "slow"]
    assert merged.meta.coverage_ratio == pytest.approx(2 / 3)
    assert [f.namespace for f in merged.meta.namespaces_failed] == ["nope"]
    assert merged.request == first.request
