"""An OTLP/HTTP trace endpoint on a free port of this machine, in a thread: each export
request (``POST /v1/traces``, protobuf) is decoded and handed to a callback, and answered
200. ``bench/tracing_cost.py`` counts the spans with it; the tests' receiver
(``tests.support.tracing``) keeps them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class OtlpHttpSink:
    """Serves from construction until :meth:`close`; ``endpoint`` is what
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` names."""

    def __init__(self, on_export: Callable[[ExportTraceServiceRequest], None]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path == "/v1/traces":
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    on_export(request)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


__all__ = ["OtlpHttpSink"]
