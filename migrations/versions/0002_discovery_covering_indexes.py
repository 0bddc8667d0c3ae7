"""discovery indexes cover the discovery filters

Worker discovery first finds a page of job ids from these indexes alone (an index-only scan, no table row
read for jobs the filters drop), then reads the page's rows by id.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 04:40:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FILTERS = ["owner_id", "direct_hire_worker_agent_id", "is_starter"]


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_discovery_tag")
        batch_op.drop_index("ix_jobs_discovery_all")
        # The tag last: the untagged range (`capability_tag_id IS NULL`) is read from this index alone too.
        batch_op.create_index(
            "ix_jobs_discovery_all", ["status", "published_at", "id", *_FILTERS, "capability_tag_id"], unique=False
        )
        batch_op.create_index(
            "ix_jobs_discovery_tag", ["status", "capability_tag_id", "published_at", "id", *_FILTERS], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_discovery_tag")
        batch_op.drop_index("ix_jobs_discovery_all")
        batch_op.create_index("ix_jobs_discovery_all", ["status", "published_at", "id"], unique=False)
        batch_op.create_index(
            "ix_jobs_discovery_tag", ["status", "capability_tag_id", "published_at", "id"], unique=False
        )
