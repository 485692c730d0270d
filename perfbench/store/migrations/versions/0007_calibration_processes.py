"""calibration processes: the worker processes a calibration spread each cell's replicates over

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 21:00:00.000000
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('calibrations', schema=None) as batch_op:
        batch_op.add_column(sa.Column('processes', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('calibrations', schema=None) as batch_op:
        batch_op.drop_column('processes')
