"""peak samples: every figure of a `perfbench peaks` probe beside the median stored as its value

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 07:00:00.000000
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('peaks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('samples', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('peaks', schema=None) as batch_op:
        batch_op.drop_column('samples')
