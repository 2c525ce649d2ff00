"""Rows, resume and merge of the generations folder."""

from __future__ import annotations

import json

import pytest

from worldtune.errors import GenerationError
from worldtune.infer import records


def _row(model, name, seed, h="h1", video=None):
    return {"model": model, "name": name, "seed": seed, "params_hash": h,
            "video": video or f"{model}/{name}_s{seed}.mp4", "views": {}}


def test_complete_needs_row_file_and_same_params(tmp_path):
    row = _row("base", "a", 0)
    assert not records.is_complete(tmp_path, None, "h1")
    assert not records.is_complete(tmp_path, row, "h1")  # row but no file: half-written, redo
    (tmp_path / "base").mkdir()
    (tmp_path / "base/a_s0.mp4").write_bytes(b"x")
    assert records.is_complete(tmp_path, row, "h1")
    assert not records.is_complete(tmp_path, row, "h2")  # other settings: redo


def test_merge_after_all_ranks_newest_row_wins(tmp_path):
    records.append_row(tmp_path, 0, _row("base", "a", 0, "old"))
    records.append_row(tmp_path, 1, _row("base", "b", 0))
    records.append_row(tmp_path, 0, _row("base", "a", 0, "new"))
    with open(records.rank_file(tmp_path, 1), "a") as f:
        f.write('{"model": "base", "name": "c"')  # torn line from a crash: ignored
    assert not records.finish_rank(tmp_path, 0, 2)  # rank 1 not done: no merge yet
    assert not (tmp_path / records.MERGED).exists()
    assert records.finish_rank(tmp_path, 1, 2)
    rows = [json.loads(x) for x in (tmp_path / records.MERGED).read_text().splitlines()]
    assert [(r["name"], r["params_hash"]) for r in rows] == [("a", "new"), ("b", "h1")]


def test_info_json_is_checked_on_reuse(tmp_path):
    records.write_info(tmp_path, None, 16.0)
    assert json.loads((tmp_path / "info.json").read_text())["format"] == "worldtune.generations"
    records.write_info(tmp_path, None, 16.0)  # same: fine
    with pytest.raises(GenerationError, match="fps"):
        records.write_info(tmp_path, None, 10.0)
