"""The data a seed VAE's decoder trains on: the recipe's pre-training episodes plus episodes of its held-out tasks.

Why the held-out tasks too: the decoder is the model's tokenizer, not its world knowledge. A real Cosmos VAE has seen
far more of the world than any user's robot, so a user's post-training target sits inside what its decoder can draw.
The seed's transformer never sees the held-out tasks (that is what the demo's post-training has to teach); its
decoder, trained only on the pre-training tasks, drew the held-out task's green block and stacked cubes ~1 dB worse
than the pre-training scenes. These held-out episodes are drawn with their own data seed (`--held-out-seed`), in the
demo's room (texture seed 0) and at the demo's settings, but none of them is one of the demo's episodes (data seed 0).

Writes one prepared dataset (`OUT/dataset`): the pre-training clips as `worldtune seed NAME --stop-after prepare`
makes them, and the held-out ones (`clips/held_out_*`), prepared with the same settings; the pre-training val clips
come first, so `--autoencoder.val_clips 8` still measures the pre-training scenes.

    python benchmarks/seed_decoder_data.py seed-predict2.5 --out /tmp/decoderdata --episodes 200 --held-out 100
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from worldtune.cli import _stage as stage_fn
from worldtune.demo import demo_data
from worldtune.scene.writer import write_demo_dataset
from worldtune.seed import recipe_for, run, seed_config


def held_out_dataset(name: str, work: Path, episodes: int, data_seed: int) -> Path:
    """The held-out tasks' episodes, at the demo's settings, prepared as the recipe prepares its own."""
    prepare = seed_config(recipe_for(name), work).prepare
    if not (work / "lerobot" / "meta" / "info.json").is_file():
        settings = {**demo_data(name), "episodes": episodes}
        write_demo_dataset(work / "lerobot", seed=data_seed, texture_seed=0, episodes_per_file=50,
                           workers=prepare.workers, **settings)
    if not (work / "dataset" / "info.json").is_file():
        stage_fn("worldtune.data.prepare")(prepare)
    return work / "dataset"


def merge(main: Path, extra: Path, out: Path, prefix: str = "held_out_") -> dict[str, int]:
    """`main`'s prepared dataset with `extra`'s clips added (same layout and size; clip files renamed with `prefix`)."""
    info, extra_info = (json.loads((p / "info.json").read_text()) for p in (main, extra))
    for key in ("layout", "height", "width", "num_frames", "fps"):
        if info.get(key) != extra_info.get(key):
            raise SystemExit(f"{extra}: {key} {extra_info.get(key)!r} differs from {main}'s {info.get(key)!r}")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(main, tmp, ignore=shutil.ignore_patterns("cache"))
    rows = pq.read_table(extra / "manifest.parquet").to_pylist()
    for r in rows:
        new = f"clips/{prefix}{Path(r['video']).name}"
        shutil.copyfile(extra / r["video"], tmp / new)
        r.update(video=new, clip_id=prefix + r["clip_id"])
    main_rows = pq.read_table(main / "manifest.parquet").to_pylist()
    pq.write_table(pa.Table.from_pylist(main_rows + rows), tmp / "manifest.parquet")
    info["merged"] = {"held_out_source": str(extra), "held_out_clips": len(rows)}
    (tmp / "info.json").write_text(json.dumps(info, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return {split: sum(r["split"] == split for r in main_rows + rows) for split in ("train", "val")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", help="the seed model whose recipe and held-out tasks to use")
    ap.add_argument("--out", required=True)
    ap.add_argument("--episodes", type=int, default=200, help="pre-training episodes (the recipe's data seed)")
    ap.add_argument("--held-out", type=int, default=100, help="episodes of the held-out tasks")
    ap.add_argument("--held-out-seed", type=int, default=5, help="their data seed (the demo's is 0)")
    a = ap.parse_args()
    out = Path(a.out)
    run(a.name, str(out / "pre"), stop_after="prepare", episodes=a.episodes)
    extra = held_out_dataset(a.name, out / "held_out", a.held_out, a.held_out_seed)
    counts = merge(out / "pre" / "dataset", extra, out / "dataset")
    print(f"{out / 'dataset'}: {counts['train']} train / {counts['val']} val clips "
          f"({a.episodes} pre-training + {a.held_out} held-out-task episodes)")


if __name__ == "__main__":
    main()
