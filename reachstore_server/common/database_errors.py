"""Which database exceptions are the database's passing trouble rather than a defect.

A connection refused or dropped (the server restarting, a failover, a network blip), a
pool with no connection to give, or a transaction the server rolled back to resolve a
conflict: each ends the call with a transient error the caller may retry, not with an
INTERNAL one. The engines' pools refuse a connection the server has closed when they hand
it out (``reachstore_server/storage/engine.py``), so the first call after the database returns gets
a fresh connection.
"""

from __future__ import annotations

from sqlalchemy import exc as sa_exc


def is_transient(error: BaseException) -> bool:
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return True
    # OperationalError covers lost connections and, on PostgreSQL, serialization failures
    # and deadlocks (SQLSTATE class 40); InterfaceError a connection already closed.
    return isinstance(error, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError))
