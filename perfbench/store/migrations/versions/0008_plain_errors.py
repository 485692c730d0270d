"""plain errors: a cell's errors against the op's stated semantics where it is judged against
another reference (Op.plain_oracle: MatMulNBits accuracy 4)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07 15:00:00.000000
"""
import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('cells', schema=None) as batch_op:
        batch_op.add_column(sa.Column('err_ours_plain', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('err_ort_plain', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('cells', schema=None) as batch_op:
        batch_op.drop_column('err_ort_plain')
        batch_op.drop_column('err_ours_plain')
