"""cell design: which worker process measured each replicate, and the order of the sides

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 14:20:00.000000
"""
import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('cells', schema=None) as batch_op:
        batch_op.add_column(sa.Column('design', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('cells', schema=None) as batch_op:
        batch_op.drop_column('design')
