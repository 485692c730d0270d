"""Alembic environment: perfbench runs migrations programmatically on an open connection."""

from alembic import context

from perfbench.store.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:  # `alembic` CLI use: build an engine from sqlalchemy.url
    from sqlalchemy import create_engine

    connection = create_engine(config.get_main_option("sqlalchemy.url")).connect()

context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
