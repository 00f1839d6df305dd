"""When the worker folds new chunks into the SQLite vector index: every FOLD_CHUNKS in
a small index, every FOLD_SHARE of it in a large one (a fold rewrites the whole file)."""

from __future__ import annotations

from kb_cli.vectors.signfile import FOLD_CHUNKS, FOLD_SHARE, fold_due


def test_a_small_index_folds_every_fold_chunks():
    assert not fold_due(FOLD_CHUNKS - 1, 20_000)
    assert fold_due(FOLD_CHUNKS, 20_000)


def test_a_large_index_folds_a_share_of_itself_at_a_time():
    million = 1_000_000
    share = int(FOLD_SHARE * million)
    assert share > FOLD_CHUNKS
    assert not fold_due(FOLD_CHUNKS, million)
    assert not fold_due(share - 1, million)
    assert fold_due(share, million)


def test_rewrites_per_chunk_stay_bounded_as_the_index_grows():
    """Bytes of index rewritten per chunk added, growing from 20k to 1M chunks one
    fold at a time: bounded by about 1/FOLD_SHARE of a chunk's record."""
    indexed, added, rewritten = 20_000, 0, 0
    while indexed < 1_000_000:
        delta = max(FOLD_CHUNKS, int(FOLD_SHARE * indexed))
        assert fold_due(delta, indexed)
        indexed += delta
        added += delta
        rewritten += indexed
    assert rewritten / added < 1.2 / FOLD_SHARE
