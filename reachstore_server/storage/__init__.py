"""The semantic store: tables, engine set-up, and the tenant-scoped functions that read
and write them. Ingest writes through it, query reads through it."""
