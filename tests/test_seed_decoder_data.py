"""benchmarks/seed_decoder_data.py: two prepared datasets merged into the one a seed decoder trains on."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.benchmark_module import load_benchmark


def prepared(root: Path, clips: list[tuple[str, str]], height: int = 128) -> Path:
    """A prepared dataset's files as `worldtune prepare` lays them out (clip bytes stand in for the mp4s)."""
    (root / "clips").mkdir(parents=True)
    rows = []
    for clip_id, split in clips:
        (root / "clips" / f"{clip_id}.mp4").write_bytes(f"{root.name}/{clip_id}".encode())
        rows.append({"clip_id": clip_id, "video": f"clips/{clip_id}.mp4", "split": split})
    pq.write_table(pa.Table.from_pylist(rows), root / "manifest.parquet")
    info = {"format": "worldtune.dataset", "layout": {"type": "grid"}, "height": height, "width": 224,
            "num_frames": 17, "fps": 15.0}
    (root / "info.json").write_text(json.dumps(info))
    return root


def test_merge_keeps_the_main_val_clips_first_and_renames_the_extra_clips(tmp_path):
    from worldtune.data.dataset import read_dataset

    merge = load_benchmark("seed_decoder_data").merge
    main = prepared(tmp_path / "pre", [("a", "train"), ("b", "val")])
    extra = prepared(tmp_path / "held", [("a", "train"), ("c", "val")])
    counts = merge(main, extra, tmp_path / "merged")
    info, rows = read_dataset(tmp_path / "merged")
    assert counts == {"train": 2, "val": 2}
    assert [r["clip_id"] for r in rows] == ["a", "b", "held_out_a", "held_out_c"]
    assert [r["clip_id"] for r in rows if r["split"] == "val"][0] == "b"  # val_clips N reads the main scenes first
    # a clip of the same name in both keeps its own bytes
    merged = tmp_path / "merged"
    assert (merged / rows[0]["video"]).read_bytes() == b"pre/a" and (merged / rows[2]["video"]).read_bytes() == b"held/a"
    assert info["merged"]["held_out_clips"] == 2


def test_merge_refuses_clips_of_another_size(tmp_path):
    merge = load_benchmark("seed_decoder_data").merge
    main = prepared(tmp_path / "pre", [("a", "train")])
    extra = prepared(tmp_path / "held", [("c", "train")], height=96)
    with pytest.raises(SystemExit, match="height"):
        merge(main, extra, tmp_path / "merged")
    assert not (tmp_path / "merged").exists()
