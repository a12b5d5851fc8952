"""PostgreSQL login roles of a test's own, for tests of connection limits."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def role_reading_dim(dsn: str, schema: str, *, connection_limit: int, ids: str,
                     count: int, first: int = 1, analyze: bool = False) -> Iterator[str]:
    """A login role with ``connection_limit`` reading ``schema.dim`` (``id bigint``
    primary key, ``name text``), made here with ``count`` rows whose ids are the SQL
    ``ids`` of ``g`` from ``first``; its sessions ended and the role dropped after."""
    import psycopg

    role = f"sltest_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE TABLE "{schema}".dim (id bigint PRIMARY KEY, name text)')
        admin.execute(f'INSERT INTO "{schema}".dim SELECT {ids}, \'n\' || g '
                      f"FROM generate_series({first}, {first + count - 1}) AS g")
        if analyze:
            admin.execute(f'ANALYZE "{schema}".dim')
        admin.execute(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT {connection_limit}')
        admin.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        admin.execute(f'GRANT SELECT ON "{schema}".dim TO "{role}"')
    try:
        yield role
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            # Pinned runtimes of the workers may still hold a connection of the role.
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE usename = %s", (role,))
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')
