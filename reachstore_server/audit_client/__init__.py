"""The client side of the audit trail, shared by every service that ships audit events:
the outbox written in each change's transaction (``outbox.py``), the gRPC layer's call
auditor (``calls.py``), the shipper sending the outbox to the audit service
(``shipper.py``), the outbox's gauges (``outbox_metrics.py``) and the one call a
composition root makes (``wiring.py``). The audit service (``reachstore_server/audit``) holds only
the server side."""
