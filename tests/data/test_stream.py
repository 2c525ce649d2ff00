"""`worldtune prepare --cache`: prepare and cache in one pass, only held-out and preview clips kept as mp4."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from worldtune.config import WorldtuneConfig
from worldtune.data import stream
from worldtune.data.cache import INDEX, LatentCache, row_encoder
from worldtune.data.dataset import CachedClips, read_dataset
from worldtune.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")


class Crash(Exception):
    """Stands in for a kill: raised from the prepare loop after a given number of clips."""


def _cfg(src: Path, out: Path, model_dir: Path, **cache) -> WorldtuneConfig:
    return WorldtuneConfig.model_validate({
        "model": {"path": str(model_dir)},
        "prepare": dict(source=str(src), out=str(out), height=32, width=64, num_frames=9, workers=1, val_fraction=0.4,
                        prompt_template="plain", preset="ultrafast"),
        "cache": dict(dtype="fp32", previews=1, **cache)})


def test_streamed_cache_keeps_val_and_preview_clips_and_resumes_after_a_crash(v3_root, tiny_model_dir, tmp_path):
    out, backup = tmp_path / "ds", tmp_path / "written"
    written: list[str] = []

    def keep_copy(clip_id: str, crash_at: int | None = None) -> None:
        """Copy each clip as written (the latents must equal an encode of exactly these pixels)."""
        shutil.copy(out / "clips" / f"{clip_id}.mp4", backup / f"{clip_id}.mp4")
        written.append(clip_id)
        if crash_at is not None and len(written) == crash_at:
            raise Crash()

    backup.mkdir()
    cfg = _cfg(v3_root, out, tiny_model_dir)
    with pytest.raises(Crash):
        stream.run(cfg, on_clip=lambda c: keep_copy(c, crash_at=3))
    summary = stream.run(cfg, on_clip=keep_copy)
    assert written[3:] and not set(written[:2]) & set(written[3:])  # the rerun redid only the unfinished episodes

    info, rows = read_dataset(out)
    split = {r["clip_id"]: r["split"] for r in rows}
    previews = set(info["streamed"]["preview_episodes"])
    assert len(previews) == 1 and summary["failed"] == 0
    for r in rows:
        on_disk = (out / r["video"]).is_file()
        assert on_disk == (r["split"] == "val" or r["episode_index"] in previews), r["clip_id"]
        assert (out / "first_frames" / f"{r['clip_id']}.png").is_file()
    assert sum(s == "train" for s in split.values()) - len(previews) >= 1  # something was deleted

    # the cache: every clip, equal to encoding the mp4 that prepare wrote; prompts; a merged index
    cache = LatentCache(summary["cache"])
    assert cache.clip_ids == set(split) and (Path(summary["cache"]) / INDEX).is_file()
    from worldtune.models.load import load_pipeline

    vae = load_pipeline(path=str(tiny_model_dir))[0].vae
    encode_row, _, _ = row_encoder(backup.parent, {"layout": {"type": "grid"}}, vae)
    for r in rows:
        ref = encode_row({**r, "video": f"written/{r['clip_id']}.mp4"})[r["clip_id"]]
        assert torch.equal(cache.latents(r["clip_id"]), ref), r["clip_id"]
    assert all(cache.text(r["prompt"]).ndim == 2 for r in rows)

    # downstream: training reads every training clip from the cache; generation takes first frames as images
    assert len(CachedClips(rows, cache, "train")) == sum(s == "train" for s in split.values())
    from worldtune.infer.inputs import read_inputs

    inputs = {i.name: i for i in read_inputs(out, split="all").items}
    assert set(inputs) == set(split)
    for name, i in inputs.items():
        if split[name] == "val":
            assert i.video is not None and i.ground_truth == i.video
        elif not (out / "clips" / f"{name}.mp4").is_file():
            assert i.image == out / "first_frames" / f"{name}.png" and i.ground_truth is None


def test_training_from_decoded_clips_of_a_streamed_dataset_is_refused(tmp_path):
    from worldtune.train.data import open_data as _open_data

    (tmp_path / "info.json").write_text(json.dumps({"format": "worldtune.dataset", "layout": {"type": "grid"},
                                                    "num_frames": 9, "streamed": {"keep_clips": "val"}}))
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"clip_id": "a", "split": "train"}]), tmp_path / "manifest.parquet")
    cfg = WorldtuneConfig.model_validate({"train": {"dataset": str(tmp_path), "cache": "none"}})
    with pytest.raises(ConfigError, match="prepare --cache"):
        _open_data(cfg, None, cache_mode=False)
