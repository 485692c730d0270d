"""run invalidation: when and why a run was invalidated

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 10:00:00.000000
"""
import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('invalidated_at', sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column('invalidated_why', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('invalidated_why')
        batch_op.drop_column('invalidated_at')
