"""Reading inputs: the three source kinds, bad entries skipped and counted, aspect policies."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.infer.conftest import H, W, make_dataset, random_frames, write_image
from worldtune.errors import DatasetError, GenerationError
from worldtune.infer.inputs import load_condition, read_inputs


def test_folder_pairs_and_counted_skips(tmp_path):
    write_image(tmp_path / "good.png", random_frames(1)[0])
    (tmp_path / "good.txt").write_text("A robot picks up a cup.\n")
    (tmp_path / "orphan_prompt.txt").write_text("no image for me")
    write_image(tmp_path / "orphan_image.png", random_frames(1)[0])
    (tmp_path / "empty.txt").write_text("  ")
    write_image(tmp_path / "empty.png", random_frames(1)[0])
    found = read_inputs(tmp_path, "image2world")
    assert [i.name for i in found.items] == ["good"]
    assert found.items[0].prompt == "A robot picks up a cup."
    assert found.skipped == {"prompt without NAME.png image": 1, "image without NAME.txt prompt": 1,
                             "empty prompt": 1}


def test_folder_text2world_needs_no_image(tmp_path):
    (tmp_path / "a.txt").write_text("A robot waves.")
    assert [i.name for i in read_inputs(tmp_path, "text2world").items] == ["a"]


def test_jsonl_relative_paths_seeds_and_bad_lines(tmp_path):
    write_image(tmp_path / "f.png", random_frames(1)[0])
    lines = [
        {"name": "one", "prompt": "p1", "image": "f.png", "seed": 7, "instruction": "pick"},
        {"name": "two", "prompt": "p2", "image": "missing.png"},
        {"name": "three", "image": "f.png"},
    ]
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    found = read_inputs(tmp_path / "in.jsonl")
    assert len(found.items) == 1
    one = found.items[0]
    assert one.image == tmp_path / "f.png" and one.seeds == (7,) and one.instruction == "pick"
    assert sum(found.skipped.values()) == 2


def test_jsonl_broken_line_names_file_and_line(tmp_path):
    (tmp_path / "in.jsonl").write_text('{"name": "a", "prompt": "x"}\n{oops\n')
    with pytest.raises(GenerationError, match=r"in.jsonl:2"):
        read_inputs(tmp_path / "in.jsonl", "text2world")


def test_dataset_split_and_ground_truth(tmp_path):
    root = make_dataset(tmp_path / "ds", {"c0": "train", "c1": "val", "c2": "val"}, num_frames=5)
    found = read_inputs(root, split="val")
    assert [i.name for i in found.items] == ["c1", "c2"]
    assert found.items[0].ground_truth == root / "clips/c1.mp4" and found.items[0].instruction == "task 1"
    assert (found.height, found.width, found.num_frames) == (H, W, 5) and found.layout["type"] == "grid"
    assert len(read_inputs(root, split="all").items) == 3
    frames = load_condition(found.items[0], "video2world", 5, H, W, "pad")
    assert frames.shape == (5, H, W, 3)


def test_no_usable_input_is_one_error(tmp_path):
    (tmp_path / "a.txt").write_text("prompt only")
    with pytest.raises(GenerationError, match="no usable input"):
        read_inputs(tmp_path, "image2world")


def test_unreadable_image_is_a_dataset_error(tmp_path):
    (tmp_path / "bad.png").write_bytes(b"not a png")
    (tmp_path / "bad.txt").write_text("x")
    item = read_inputs(tmp_path).items[0]
    with pytest.raises(DatasetError, match="bad.png"):
        load_condition(item, "image2world", 1, H, W, "pad")


@pytest.mark.parametrize("policy", ["pad", "crop"])
def test_other_aspect_is_fitted_by_policy(tmp_path, policy):
    tall = np.full((40, 20, 3), 200, np.uint8)  # 1:2 portrait into a 32x48 landscape frame
    write_image(tmp_path / "tall.png", tall)
    (tmp_path / "tall.txt").write_text("x")
    got = load_condition(read_inputs(tmp_path).items[0], "image2world", 1, 32, 48, policy)
    assert got.shape == (1, 32, 48, 3)
    if policy == "pad":
        assert got[0, :, :10].max() == 0 and got[0, :, -10:].max() == 0  # black bars left and right
        assert got[0, 16, 24].min() == 200  # the image sits in the middle
    else:
        assert got.min() == 200  # covered, no bars
