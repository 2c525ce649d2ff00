"""Generation facing crafted names and an adapter of another model family."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.infer.conftest import H, W, random_frames, write_image
from worldtune.config import WorldtuneConfig
from worldtune.errors import GenerationError
from worldtune.infer.generate import run as generate


def _cfg(model_dir: Path, inputs: Path, out: Path, **gen) -> WorldtuneConfig:
    base = dict(inputs=str(inputs), out=str(out), seeds=[1], steps=2, guidance=1.0, height=H, width=W, num_frames=5,
                max_sequence_length=8)
    return WorldtuneConfig.model_validate({"model": {"path": str(model_dir)}, "generate": {**base, **gen}})


def test_crafted_names_stay_inside_the_output_folder(tiny_model_dir, tmp_path):
    image = write_image(tmp_path / "in.png", random_frames(1, seed=1)[0])
    escape = tmp_path / "escaped"
    names = ["../../escaped/evil", str(escape / "abs"), ".hidden/..", "ok name"]
    (tmp_path / "inputs.jsonl").write_text("".join(
        json.dumps({"name": n, "prompt": "a robot arm", "image": str(image)}) + "\n" for n in names))
    out = tmp_path / "sandbox" / "gen"
    generate(_cfg(tiny_model_dir, tmp_path / "inputs.jsonl", out))
    written = [p for p in tmp_path.rglob("*.mp4")]
    assert len(written) == 8 and all(out in p.parents for p in written), written  # 4 by the model, 4 first_frame
    assert not escape.exists()
    rows = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    assert len({r["name"] for r in rows}) == 4
    assert all("/" not in r["name"] and not r["name"].startswith(".") for r in rows)


def test_an_adapter_of_another_model_family_is_refused_before_any_video(tiny_model_dir, adapter_dir, tmp_path):
    ad = Path(shutil.copytree(adapter_dir, tmp_path / "a"))
    (ad / "worldtune_adapter.json").write_text(json.dumps({"base_model": "predict2-2b", "family": "predict2"}))
    (tmp_path / "in").mkdir()
    write_image(tmp_path / "in" / "cube.png", random_frames(1, seed=2)[0])
    (tmp_path / "in" / "cube.txt").write_text("a robot arm")
    out = tmp_path / "gen"
    with pytest.raises(GenerationError, match="trained on a predict2 model"):
        generate(_cfg(tiny_model_dir, tmp_path / "in", out, adapters=[{"path": str(ad)}]))
    assert not list(out.rglob("*.mp4"))
