"""Store records -> ingest protobuf messages."""

from __future__ import annotations

from reachstore.ingest.v1 import ingest_service_pb2 as pb
from reachstore_server.common import errors
from reachstore_server.common.timefmt import rfc3339
from reachstore_server.storage import tasks as task_states
from reachstore_server.storage.repository import NamespaceInfo
from reachstore_server.storage.tasks import TaskInfo

# How soon an agent should look again at a task that is still running.
POLL_AFTER_MS = {task_states.QUEUED: 500, task_states.PROCESSING: 250, task_states.CANCELLING: 250}

_STATE = {
    task_states.QUEUED: pb.TASK_STATE_QUEUED,
    task_states.PROCESSING: pb.TASK_STATE_PROCESSING,
    task_states.COMPLETED: pb.TASK_STATE_COMPLETED,
    task_states.FAILED: pb.TASK_STATE_FAILED,
    task_states.CANCELLING: pb.TASK_STATE_CANCELLING,
    task_states.CANCELLED: pb.TASK_STATE_CANCELLED,
}
_PHASE = {
    "chunking": pb.TASK_PHASE_CHUNKING,
    "embedding": pb.TASK_PHASE_EMBEDDING,
    "indexing": pb.TASK_PHASE_INDEXING,
}
_HINT = {
    task_states.COMPLETED: pb.AGENT_DECISION_HINT_DONE_FETCH_DOC,
    task_states.FAILED: pb.AGENT_DECISION_HINT_INSPECT_ERROR_CODE,
    task_states.CANCELLED: pb.AGENT_DECISION_HINT_STOP,
}


def namespace_to_pb(info: NamespaceInfo) -> pb.Namespace:
    return pb.Namespace(
        name=info.name,
        embedding_model=info.embedding_model,
        dimension=info.dimension,
        document_count=info.document_count,
        chunk_count=info.chunk_count,
        created_at=rfc3339(info.created_at),
    )


def task_to_pb(task: TaskInfo) -> pb.Task:
    message = pb.Task(
        task_id=task.task_id,
        namespace=task.namespace,
        document_id=task.document_id,
        state=_STATE[task.state],
        phase=_PHASE.get(task.phase, pb.TASK_PHASE_UNSPECIFIED),
        percent=task.percent,
        agent_decision_hint=_HINT.get(task.state, pb.AGENT_DECISION_HINT_POLL_AGAIN),
        created_at=rfc3339(task.created_at),
        updated_at=rfc3339(task.updated_at),
    )
    if task.state in POLL_AFTER_MS:
        message.poll_after_ms = POLL_AFTER_MS[task.state]
    if task.state == task_states.FAILED:
        spec = errors.lookup(task.error_code)
        message.error.CopyFrom(
            errors.make_failure(
                spec,
                task.error_message or None,
                structured_data=task.error_data,
                document_id=task.document_id,
                namespace=task.namespace,
            )
        )
    return message
