"""Alembic environment: migrations run on the connection `kb` hands over."""

from alembic import context

from kb_cli.migrations import VERSION_TABLE

connection = context.config.attributes["connection"]
# A version table of kb's own, so another Alembic user of the same schema cannot clash.
context.configure(connection=connection, target_metadata=None, version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
