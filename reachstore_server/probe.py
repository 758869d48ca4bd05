"""A readiness probe for a gRPC component that speaks TLS: ``python -m reachstore_server.probe PORT
SERVICE [NAME]``. Kubernetes' own gRPC probe cannot speak TLS, so the deployment example runs this
instead (deploy/k8s/reachstore.yaml). It asks the standard health service on this host and
exits 0 only for SERVING, 1 otherwise; TLS and the CA come from the same
``REACHSTORE_TLS_*`` settings the component reads. NAME is the name its certificate
carries (the probe connects to 127.0.0.1, which a certificate for ``query`` does not
name); default ``REACHSTORE_TLS_SERVER_NAME``.

It imports grpc and the health stubs only, so a probe costs a fraction of a second.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from grpc_health.v1 import health_pb2, health_pb2_grpc

from reachstore_server.common.config_errors import ConfigError
from reachstore_server.common.tls import secure_channel, tls_from_env

TIMEOUT_S = 3.0


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or not (argv[0].isascii() and argv[0].isdigit()):
        sys.stderr.write("usage: python -m reachstore_server.probe PORT SERVICE [NAME]\n")
        return 2
    port, service = argv[:2]
    try:
        tls = tls_from_env(os.environ)
    except ConfigError as exc:
        sys.stderr.write(f"probe: {exc}\n")
        return 2
    if len(argv) == 3:
        tls = dataclasses.replace(tls, server_name=argv[2])
    with secure_channel(f"127.0.0.1:{port}", tls) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT_S
            )
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
            sys.stderr.write(f"probe: {type(exc).__name__}\n")
            return 1
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
