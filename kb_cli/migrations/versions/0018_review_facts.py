"""What a reviewer is told about a revision.

Chunks know the last page they cover: `page_end`, when a chunk's text runs from one
page (its `page`) onto another, so that a passage is cited by the pages it spans ("pages
1-2") instead of the one it starts on. Chunks made before have none: they are cited by
their first page, as they were.

A revision knows how many of its pages were read by OCR (`document_revisions.ocr_pages`,
written by the parse that read them), so that `kb status ID` can say it without reading
the history. Revisions parsed before have none: the count is not shown for them.

Revision ID: 0018_review_facts
Revises: 0017_task_requests
"""

import sqlalchemy as sa
from alembic import op

revision = "0018_review_facts"
down_revision = "0017_task_requests"


def upgrade() -> None:
    op.add_column("chunks", sa.Column("page_end", sa.Integer(), nullable=True))
    op.add_column("document_revisions", sa.Column("ocr_pages", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("document_revisions", "ocr_pages")
    op.drop_column("chunks", "page_end")
