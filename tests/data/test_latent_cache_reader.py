"""`LatentCache` keeps each shard open once read (a step reads dozens of items), and still pickles for workers."""

import json
import pickle

import torch
from safetensors.torch import save_file

from worldtune.data.latent_cache import FORMAT, VERSION, LatentCache


def test_reads_every_item_of_several_shards_and_pickles_after_reading(tmp_path):
    (tmp_path / "info.json").write_text(json.dumps({"format": FORMAT, "version": VERSION}))
    want = {f"clip{i}": torch.randn(4, 2, 3, 3) for i in range(6)}
    save_file({k: want[k] for k in ("clip0", "clip1", "clip2")}, str(tmp_path / "latents-r000-000000.safetensors"))
    save_file({k: want[k] for k in ("clip3", "clip4", "clip5")}, str(tmp_path / "latents-r000-000001.safetensors"))
    cache = LatentCache(tmp_path)
    for _ in range(2):  # the second pass reads through the readers the first one opened
        for k, v in want.items():
            assert torch.equal(cache.latents(k), v)
    assert len(cache._open) == 2
    copy = pickle.loads(pickle.dumps(cache))  # a DataLoader worker's copy opens its own readers
    assert copy._open == {} and torch.equal(copy.latents("clip4"), want["clip4"])
