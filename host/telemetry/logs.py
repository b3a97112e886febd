"""Log lines as JSON, one object per line, for log shippers (`--log-format json`).

Every line astrid writes on stderr goes through a `JsonFormatter`: the
loggers' lines (`astrid.*`, the capsules' own `astrid.capsule`), the server's
events (`astrid.events`: reloads, grant and mount changes, failed logins)
and the HTTP access log (`astrid.access`). Each object has

    {"time": "2026-05-01T09:30:12.345Z", "level": "info", "logger": "astrid.access",
     "message": "access 2026-05-01T09:30:12.345Z 127.0.0.1 alice POST resources/read ...",
     "event": "access", "client": "127.0.0.1", "principal": "alice", ...}

`message` is the line the text format prints; what a line is about is also
given as fields (`event` and the fields of that event, passed with
`extra={"event": ..., "fields": {...}}`), so a shipper never parses the
text. While tracing is on, a line written inside a span carries its
`trace_id` and `span_id`.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from astrid.host.telemetry import tracing

EVENT = "event"  # the `extra` key naming what a line is about
FIELDS = "fields"  # the `extra` key holding its fields (a dict of JSON values)


def utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds % 1 * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per record; `prefix` is dropped from the message (the text format's `astrid: `)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": utc(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        event = getattr(record, EVENT, None)
        if isinstance(event, str):
            line["event"] = event
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                line.setdefault(key, value)
        ids = tracing.current_ids()
        if ids is not None:
            line["trace_id"], line["span_id"] = ids
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def say(message: str, *, logger: str = "astrid", level: str = "info", **fields: Any) -> str:
    """A line the CLI writes itself (the serve banner), as JSON."""
    line: dict[str, Any] = {"time": utc(time.time()), "level": level, "logger": logger, "message": message}
    line.update(fields)
    return json.dumps(line, ensure_ascii=False, default=str)
