"""Frame sizes a stage cannot use are refused before any work, in one line that names the nearest valid sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from worldtune.config import PrepareConfig, WorldtuneConfig, load_config
from worldtune.data import cache, stream
from worldtune.data import prepare as prep
from worldtune.errors import ConfigError


def _one_line(e: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("side, value, valid", [("height", 181, "180 or 182"), ("width", 0, "2"), ("width", -4, "2")])
def test_prepare_sides_must_be_positive_and_even(side, value, valid):
    with pytest.raises(ConfigError) as e:
        load_config(None, [f"--prepare.{side}", str(value)])
    assert f"prepare.{side}" in _one_line(e) and f"use {valid}" in str(e.value)


@pytest.mark.parametrize("size, grid, valid", [
    ((182, 320), (2, 2), "a height of 180 or 184 and a width of 320"),
    ((180, 324), (2, 4), "a height of 180 and a width of 320 or 328"),
    ((4, 8), (3, 1), "a height of 6 and a width of 8"),
])
def test_prepare_grid_must_split_into_even_cells(tmp_path, size, grid, valid):
    """A grid whose cells would be odd (or not whole) is refused before any work, naming sizes that split."""
    cfg = PrepareConfig(source=str(tmp_path / "none"), out=str(tmp_path / "out"), height=size[0], width=size[1],
                        grid={"rows": grid[0], "cols": grid[1], "cells": {"exterior_1": [0, 0]}})
    with pytest.raises(ConfigError, match="grid cells of even size") as e:
        prep.run(cfg, quiet=True)
    assert valid in _one_line(e)
    assert not (tmp_path / "out").exists()


def _dataset(root: Path, height: int, width: int) -> Path:
    """A prepared dataset's metadata only: the size check must come before any clip is read or model loaded."""
    root.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([{"clip_id": "a", "video": "clips/a.mp4", "prompt": "p", "split": "train"}]),
                   root / "manifest.parquet")
    (root / "info.json").write_text(json.dumps({
        "format": "worldtune.dataset", "version": 1, "height": height, "width": width, "num_frames": 9,
        "layout": {"type": "grid", "rows": 2, "cols": 2, "cells": {"exterior_1": [0, 0]}}}))
    return root


@pytest.mark.parametrize("model", ["tiny-predict2.5", "tiny-cosmos3"])
def test_cache_refuses_a_size_the_model_cannot_take(tmp_path, model):
    """DROID's 180x320: Predict's VAE would crop it to 176 rows silently, Cosmos 3's fails inside its encoder."""
    root = _dataset(tmp_path / "ds", 180, 320)
    cfg = load_config(None, ["--model.name", model, "--cache.dataset", str(root), "--cache.out", str(tmp_path / "c")])
    with pytest.raises(ConfigError, match="multiples of 16 pixels") as e:
        cache.run(cfg)
    assert f"dataset {root} has frames of 180x320" in _one_line(e)
    assert "prepare it again with a height of 176 or 192 and a width of 320" in str(e.value)
    assert not (tmp_path / "c").exists()


def test_prepare_with_cache_refuses_a_size_the_model_cannot_take(tmp_path):
    cfg = WorldtuneConfig.model_validate({
        "model": {"name": "tiny-predict2.5"},
        "prepare": {"source": str(tmp_path / "none"), "out": str(tmp_path / "out"), "height": 180, "width": 320}})
    with pytest.raises(ConfigError, match="prepare.height/width is 180x320, but Cosmos-Predict2.5 needs") as e:
        stream.run(cfg)
    assert "use a height of 176 or 192 and a width of 320" in _one_line(e)
    assert not (tmp_path / "out").exists()
