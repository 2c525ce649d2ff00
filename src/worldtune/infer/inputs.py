"""What to generate from: (conditioning frames, prompt) pairs read from three kinds of source.

- a folder of `NAME.png` (or .jpg/.jpeg/.mp4) + `NAME.txt` pairs, the layout of NVIDIA's eval sets;
- a JSONL file, one `{"name", "prompt", "image" | "video", "seed"?, "instruction"?}` per line
  (relative paths are relative to the JSONL file);
- a prepared worldtune dataset (info.json + manifest.parquet): its held-out clips, with the clip
  itself kept as ground truth. For a dataset of separate camera views (layout "separate") an input
  has one clip per camera (`views`), and generation runs the multi-view model.

Reading never decodes pixels: an input is a description; frames are loaded (and fitted to the
generation size) only when it is generated, so listing 10k inputs is cheap. Bad entries (a prompt
without its image, an unreadable line) are skipped and counted by reason, not fatal, unless
nothing is left.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from worldtune.errors import DatasetError, GenerationError
from worldtune.names import inside, safe_name

Mode = Literal["image2world", "video2world", "text2world"]
IMAGE_EXTS = (".png", ".jpg", ".jpeg")
VIDEO_EXTS = (".mp4", ".mov", ".mkv", ".webm")


@dataclass(frozen=True)
class GenerationInput:
    """One thing to generate: a name, a prompt and (except text2world) conditioning pixels."""

    name: str
    prompt: str
    image: Path | None = None
    video: Path | None = None
    instruction: str | None = None
    seeds: tuple[int, ...] | None = None  # overrides generate.seeds for this input (JSONL `seed`)
    ground_truth: Path | None = None  # the real clip (prepared datasets only)
    views: tuple[tuple[str, Path], ...] | None = None  # (role, clip) per camera: separate-views datasets

    @property
    def view_files(self) -> dict[str, Path]:
        return dict(self.views or ())


@dataclass
class InputSet:
    """The inputs of a run plus what the source says about size and layout."""

    items: list[GenerationInput]
    source: str
    kind: Literal["folder", "jsonl", "dataset"]
    skipped: Counter = field(default_factory=Counter)  # reason -> count
    layout: dict[str, Any] | None = None
    height: int | None = None
    width: int | None = None
    num_frames: int | None = None
    fps: float | None = None


def read_inputs(path: str | Path, mode: Mode = "image2world", split: str = "val") -> InputSet:
    """Dispatch on the source kind; errors name the path and what it should look like."""
    p = Path(path)
    if p.is_file() and p.suffix == ".jsonl":
        found = _read_jsonl(p, mode)
    elif p.is_dir() and (p / "info.json").is_file() and (p / "manifest.parquet").is_file():
        found = _read_dataset(p, split)
    elif p.is_dir():
        found = _read_folder(p, mode)
    else:
        raise GenerationError(
            f"generate.inputs={p} does not exist or is not a folder, a .jsonl file or a prepared dataset"
        )
    _check_unique(found)
    if not found.items:
        why = ", ".join(f"{n} {r}" for r, n in found.skipped.items()) or "it is empty"
        raise GenerationError(f"generate.inputs={p}: no usable input ({why})")
    return found


def _check_unique(found: InputSet) -> None:
    dup = [n for n, c in Counter(i.name for i in found.items).items() if c > 1]
    if dup:
        raise GenerationError(f"{found.source}: input name '{dup[0]}' occurs more than once; names name output files")


def _read_folder(root: Path, mode: Mode) -> InputSet:
    out = InputSet([], str(root), "folder")
    stems: dict[str, dict[str, Path]] = {}
    for f in sorted(root.iterdir()):
        if f.is_file() and not f.name.startswith("."):
            stems.setdefault(f.stem, {})[f.suffix.lower()] = f
    for name, files in stems.items():
        media = [files[e] for e in IMAGE_EXTS + VIDEO_EXTS if e in files]
        if ".txt" not in files:
            if media:
                out.skipped["image without NAME.txt prompt"] += 1
            continue
        prompt = files[".txt"].read_text(encoding="utf-8", errors="replace").strip()
        if not prompt:
            out.skipped["empty prompt"] += 1
            continue
        if not media and mode != "text2world":
            out.skipped["prompt without NAME.png image"] += 1
            continue
        m = media[0] if media else None
        is_video = m is not None and m.suffix.lower() in VIDEO_EXTS
        out.items.append(GenerationInput(safe_name(name), prompt, image=None if is_video else m,
                                         video=m if is_video else None))
    return out


def _read_jsonl(path: Path, mode: Mode) -> InputSet:
    out = InputSet([], str(path), "jsonl")
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise GenerationError(f"{path}:{n}: not valid JSON ({e.msg}); one object per line") from None
        if not isinstance(row, dict) or not str(row.get("prompt") or "").strip():
            out.skipped["line without a prompt"] += 1
            continue
        name = safe_name(row.get("name") or f"{path.stem}_{n:05d}")
        media = {}
        for key in ("image", "video"):
            if row.get(key):
                f = Path(row[key])
                media[key] = f if f.is_absolute() else path.parent / f
        if not media and mode != "text2world":
            out.skipped["line without image or video"] += 1
            continue
        if any(not f.is_file() for f in media.values()):
            out.skipped["image or video file missing"] += 1
            continue
        seed = row.get("seed")
        seeds = None if seed is None else tuple(int(s) for s in (seed if isinstance(seed, list) else [seed]))
        out.items.append(GenerationInput(name, str(row["prompt"]).strip(), image=media.get("image"),
                                         video=media.get("video"), instruction=row.get("instruction"), seeds=seeds))
    return out


def _read_dataset(root: Path, split: str) -> InputSet:
    import pyarrow.parquet as pq

    try:
        info = json.loads((root / "info.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise GenerationError(f"{root}/info.json: cannot read ({e})") from None
    if info.get("format") != "worldtune.dataset":
        raise GenerationError(f"{root}/info.json: not a worldtune dataset (format={info.get('format')!r}); "
                              f"run `worldtune prepare` or pass a folder/JSONL of inputs")
    try:
        table = pq.read_table(root / "manifest.parquet").to_pylist()
    except Exception as e:  # pyarrow raises several types for a bad file
        raise GenerationError(f"{root}/manifest.parquet: cannot read ({str(e).splitlines()[0]})") from None
    out = InputSet([], str(root), "dataset", layout=info.get("layout"), height=info.get("height"),
                   width=info.get("width"), num_frames=info.get("num_frames"), fps=info.get("fps"))
    for row in table:
        if split != "all" and row.get("split") != split:
            continue
        name, prompt, task = safe_name(row["clip_id"]), str(row.get("prompt") or ""), row.get("task")
        if row.get("views"):  # separate camera views: one clip per role
            views = tuple((safe_name(role), inside(root, rel, f"{root}/manifest.parquet views"))
                          for role, rel in json.loads(row["views"]).items())
            if not all(f.is_file() for _, f in views):
                out.skipped["view clip file missing"] += 1
                continue
            out.items.append(GenerationInput(name, prompt, instruction=task, views=views))
            continue
        video = inside(root, str(row["video"]), f"{root}/manifest.parquet video")
        if not video.is_file():
            first = root / "first_frames" / f"{name}.png"  # `prepare --cache` keeps only first frames
            if first.is_file():
                out.items.append(GenerationInput(name, prompt, image=first, instruction=task))
            else:
                out.skipped["clip file missing"] += 1
            continue
        out.items.append(GenerationInput(name, prompt, video=video, instruction=task, ground_truth=video))
    if not out.items and not out.skipped:
        raise GenerationError(f"{root}: no clip has split={split!r}; set generate.split=\"all\" or re-prepare "
                              f"with a val_fraction > 0")
    return out


# ------------------------------------------------------------------------------------- pixels
def load_condition(inp: GenerationInput, mode: Mode, num_pixel_frames: int, height: int, width: int,
                   policy: Literal["pad", "crop"]) -> np.ndarray | None:
    """The conditioning frames [T,H,W,3] uint8 at the generation size (None for text2world).

    image2world takes the image (or a video's first frame); video2world takes the first
    `num_pixel_frames` frames of the video. Another aspect ratio is fitted by `policy`, as the
    dataset stage does: "pad" letterboxes with black, "crop" cuts the centre; a frame of the
    right size is untouched, so it is exactly what a direct pipeline call would see. Raises DatasetError/GenerationError naming the file,
    which the caller counts as a skipped input.
    """
    if mode == "text2world":
        return None
    if inp.image is not None:
        if mode == "video2world" and num_pixel_frames > 1:
            raise GenerationError(f"{inp.image}: video2world with {num_pixel_frames} frames needs a video, not an image")
        frames = _read_image(inp.image)[None]
    elif inp.video is not None:
        from worldtune.data.video import read_frames

        n = 1 if mode == "image2world" else num_pixel_frames
        frames = read_frames(inp.video, indices=list(range(n)))
    else:
        raise GenerationError(f"input {inp.name}: {mode} needs an image or a video")
    from worldtune.data.layout import resize_frames

    return resize_frames(frames, height, width, policy)


def load_view_conditions(inp: GenerationInput, height: int, width: int,
                         policy: Literal["pad", "crop"]) -> dict[str, np.ndarray]:
    """The first frame [1,H,W,3] of every camera of a separate-views input (multi-view image2world)."""
    return {role: load_condition(GenerationInput(inp.name, inp.prompt, video=f), "image2world", 1, height, width, policy)
            for role, f in inp.views or ()}


def _read_image(path: Path) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            return np.array(im.convert("RGB"))
    except (OSError, UnidentifiedImageError) as e:
        raise DatasetError(f"image {path} cannot be read ({type(e).__name__}): the file is corrupt or not an image") from None
