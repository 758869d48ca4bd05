"""Alembic's migration environment for reachstore's schema (``env.py``, ``versions/``).

It is driven from code (``reachstore_server/storage/schema.py``), never from an ``alembic.ini``,
so an
installed wheel migrates the same way a checkout does."""
