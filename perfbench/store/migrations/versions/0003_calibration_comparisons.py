"""noise calibration, comparisons with their verdicts, run origin

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 22:10:00.000000
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('origin', sa.String(length=16), nullable=False, server_default='run'))
    op.create_table(
        'calibrations',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('host_class_id', sa.Integer(), nullable=False),
        sa.Column('suite', sa.String(length=255), nullable=False),
        sa.Column('filters', sa.JSON(), nullable=False),
        sa.Column('rounds', sa.Integer(), nullable=False),
        sa.Column('build_id', sa.String(length=64), nullable=False),
        sa.Column('hostname', sa.String(length=255), nullable=False),
        sa.Column('ort_version', sa.String(length=32), nullable=False),
        sa.Column('protocol_version', sa.Integer(), nullable=False),
        sa.Column('method', sa.Text(), nullable=False),
        sa.Column('pooled', sa.JSON(), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['host_class_id'], ['host_classes.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_calibrations_host_class_id', 'calibrations', ['host_class_id'])
    op.create_table(
        'calibration_cells',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('calibration_id', sa.Integer(), nullable=False),
        sa.Column('case_id', sa.String(length=512), nullable=False),
        sa.Column('timing_hash', sa.String(length=32), nullable=False),
        sa.Column('dtype', sa.String(length=8), nullable=False),
        sa.Column('threads', sa.Integer(), nullable=False),
        sa.Column('device', sa.String(length=16), nullable=False),
        sa.Column('cache', sa.String(length=8), nullable=False),
        sa.Column('spin', sa.String(length=8), nullable=False),
        sa.Column('rounds', sa.Integer(), nullable=False),
        sa.Column('sigma_ab', sa.Float(), nullable=False),
        sa.Column('sigma_ours', sa.Float(), nullable=False),
        sa.Column('sigma_ort', sa.Float(), nullable=False),
        sa.Column('sigma_ratio', sa.Float(), nullable=False),
        sa.Column('raw', sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(['calibration_id'], ['calibrations.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_calibration_cells_calibration_id', 'calibration_cells', ['calibration_id'])
    op.create_index('ix_calibration_cells_case_id', 'calibration_cells', ['case_id'])
    op.create_table(
        'comparisons',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('base_run_id', sa.Integer(), nullable=True),
        sa.Column('head_run_id', sa.Integer(), nullable=True),
        sa.Column('host_class_id', sa.Integer(), nullable=True),
        sa.Column('base_ref', sa.String(length=255), nullable=False),
        sa.Column('head_ref', sa.String(length=255), nullable=False),
        sa.Column('summary', sa.JSON(), nullable=False),
        sa.Column('exit_code', sa.Integer(), nullable=False),
        sa.Column('document', sa.JSON(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['base_run_id'], ['runs.id'], ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['head_run_id'], ['runs.id'], ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['host_class_id'], ['host_classes.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_table(
        'comparison_rows',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('comparison_id', sa.Integer(), nullable=False),
        sa.Column('case_id', sa.String(length=512), nullable=False),
        sa.Column('op', sa.String(length=128), nullable=False),
        sa.Column('dtype', sa.String(length=8), nullable=False),
        sa.Column('threads', sa.Integer(), nullable=False),
        sa.Column('device', sa.String(length=16), nullable=False),
        sa.Column('cache', sa.String(length=8), nullable=False),
        sa.Column('spin', sa.String(length=8), nullable=False),
        sa.Column('verdict', sa.String(length=24), nullable=False),
        sa.Column('abs_verdict', sa.String(length=24), nullable=True),
        sa.Column('ratio_verdict', sa.String(length=24), nullable=True),
        sa.Column('abs_change', sa.Float(), nullable=True),
        sa.Column('ratio_change', sa.Float(), nullable=True),
        sa.Column('sigma_b', sa.Float(), nullable=True),
        sa.Column('why', sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(['comparison_id'], ['comparisons.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_comparison_rows_comparison_id', 'comparison_rows', ['comparison_id'])
    op.create_index('ix_comparison_rows_case_id', 'comparison_rows', ['case_id'])


def downgrade() -> None:
    op.drop_table('comparison_rows')
    op.drop_table('comparisons')
    op.drop_table('calibration_cells')
    op.drop_table('calibrations')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('origin')
