"""One JSON log formatter, configured by each component's composition root."""

from __future__ import annotations

import json
import logging
import sys
import time

from reachstore_server.common import tracing
from reachstore_server.common.pii import Masker, default_masker

# Context a log call may pass as ``extra={...}``; it becomes fields of the JSON line, so
# logs can be searched by trace, task or action instead of by message text.
CONTEXT_FIELDS = ("trace_id", "task_id", "action_id", "channel", "state", "reason")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, component, logger, message, exception.

    Messages and exceptions pass through the PII masker (the one receipts and the audit
    trail use): a log line may quote what a caller or a receiver sent."""

    def __init__(self, component: str, masker: Masker | None = None) -> None:
        super().__init__()
        self.component = component
        self._mask = masker.mask_text if masker is not None else str

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "component": self.component,
            "logger": record.name,
            "msg": self._mask(record.getMessage()),
        }
        for field in CONTEXT_FIELDS:
            value = getattr(record, field, None)
            if value is not None:
                entry[field] = value
        if "trace_id" not in entry:
            # The current span's trace when tracing is on, else the call's caller-given one.
            trace_id = tracing.log_trace_id()
            if trace_id:
                entry["trace_id"] = trace_id
        if record.exc_info:
            entry["exc"] = self._mask(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False)


def configure(component: str, level: str = "INFO") -> None:
    """Sends every log record of this process to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(component, default_masker()))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
