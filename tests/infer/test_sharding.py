"""The input split across processes: complete, disjoint, balanced, and order-independent."""

from __future__ import annotations

import random

import pytest

from worldtune.infer.sharding import process_index, shard


@pytest.mark.parametrize("n,world", [(0, 3), (1, 4), (10, 3), (17, 8), (5, 1)])
def test_shards_partition_the_inputs(n, world):
    items = [f"clip_{i:03d}" for i in range(n)]
    parts = [shard(items, r, world) for r in range(world)]
    flat = [x for p in parts for x in p]
    assert sorted(flat) == sorted(items)  # nothing lost
    assert len(flat) == len(set(flat))  # no duplicates
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1  # balanced


def test_shard_ignores_listing_order():
    items = [f"x{i}" for i in range(20)]
    shuffled = items[:]
    random.Random(0).shuffle(shuffled)
    assert shard(items, 1, 3) == shard(shuffled, 1, 3)


def test_bad_rank_is_an_error():
    with pytest.raises(ValueError):
        shard(["a"], 2, 2)


def test_process_index_reads_launcher_env(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert process_index() == (3, 4, 1)
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    assert process_index() == (0, 1, 0)
