"""tickets: losing ranges as the work queue, their history, the runs taken in

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 01:00:00.000000
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'tickets',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('uid', sa.String(length=32), nullable=False),
        sa.Column('host_class_id', sa.Integer(), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('group_key', sa.String(length=512), nullable=False),
        sa.Column('op', sa.String(length=128), nullable=False),
        sa.Column('dtype', sa.String(length=8), nullable=False),
        sa.Column('device', sa.String(length=16), nullable=False),
        sa.Column('threads', sa.Integer(), nullable=False),
        sa.Column('cache', sa.String(length=8), nullable=False),
        sa.Column('spin', sa.String(length=8), nullable=False),
        sa.Column('modes', sa.JSON(), nullable=False),
        sa.Column('state', sa.String(length=8), nullable=False),
        sa.Column('closed_reason', sa.String(length=16), nullable=True),
        sa.Column('merged_into_id', sa.Integer(), nullable=True),
        sa.Column('split_from_id', sa.Integer(), nullable=True),
        sa.Column('title', sa.Text(), nullable=False),
        sa.Column('priority', sa.Float(), nullable=False),
        sa.Column('worst_ratio', sa.Float(), nullable=True),
        sa.Column('cells', sa.JSON(), nullable=False),
        sa.Column('filters', sa.JSON(), nullable=False),
        sa.Column('suite', sa.String(length=255), nullable=False),
        sa.Column('first_run_id', sa.Integer(), nullable=True),
        sa.Column('first_sha', sa.String(length=64), nullable=True),
        sa.Column('last_run_id', sa.Integer(), nullable=True),
        sa.Column('last_sha', sa.String(length=64), nullable=True),
        sa.Column('closed_run_id', sa.Integer(), nullable=True),
        sa.Column('reopened', sa.Integer(), nullable=False),
        sa.Column('github', sa.JSON(), nullable=False),
        sa.Column('opened_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=False),
        sa.Column('closed_at', sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(['host_class_id'], ['host_classes.id']),
        sa.ForeignKeyConstraint(['merged_into_id'], ['tickets.id']),
        sa.ForeignKeyConstraint(['split_from_id'], ['tickets.id']),
        sa.ForeignKeyConstraint(['first_run_id'], ['runs.id'], ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['last_run_id'], ['runs.id'], ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['closed_run_id'], ['runs.id'], ondelete='SET NULL'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('uid'),
    )
    op.create_index('ix_tickets_host_class_id', 'tickets', ['host_class_id'])
    op.create_index('ix_tickets_group_key', 'tickets', ['group_key'])
    op.create_table(
        'ticket_events',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('ticket_id', sa.Integer(), nullable=False),
        sa.Column('run_id', sa.Integer(), nullable=True),
        sa.Column('event', sa.String(length=16), nullable=False),
        sa.Column('detail', sa.JSON(), nullable=False),
        sa.Column('at', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['ticket_id'], ['tickets.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='SET NULL'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_ticket_events_ticket_id', 'ticket_events', ['ticket_id'])
    op.create_table(
        'ticket_runs',
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('host_class_id', sa.Integer(), nullable=False),
        sa.Column('summary', sa.JSON(), nullable=False),
        sa.Column('applied_at', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['host_class_id'], ['host_classes.id']),
        sa.PrimaryKeyConstraint('run_id'),
    )
    op.create_index('ix_ticket_runs_host_class_id', 'ticket_runs', ['host_class_id'])


def downgrade() -> None:
    op.drop_index('ix_ticket_runs_host_class_id', table_name='ticket_runs')
    op.drop_table('ticket_runs')
    op.drop_index('ix_ticket_events_ticket_id', table_name='ticket_events')
    op.drop_table('ticket_events')
    op.drop_index('ix_tickets_group_key', table_name='tickets')
    op.drop_index('ix_tickets_host_class_id', table_name='tickets')
    op.drop_table('tickets')
