"""`CheckpointManager`: atomic, rotated, resumable checkpoints of a training run.

A checkpoint is a folder `checkpoints/step-NNNNNNNN/` holding
    trainable.safetensors  the trainable tensors under their in-memory names (fp32)
    optimizer.pt           the optimizer state (loaded with weights_only=True)
    ema.safetensors        EMA weights, when EMA is on
    state.json             step, LR-scheduler and sampler state, base-model fingerprint, config
    rng.pt                 torch / CUDA / numpy / python RNG states
    COMPLETE               written last
It is written into a hidden temporary folder, every file fsynced, then renamed into place, so a
crash mid-save leaves the previous checkpoint as the newest complete one. A re-save of the same
step (a finished run started again) moves the old folder aside by a rename before the new one
takes its name, so no kill point leaves a COMPLETE folder without its weights.
Loading checks every file and raises `DamagedCheckpointError` naming it; `resume = auto` then
falls back to the previous complete checkpoint. Every file goes through the atomic layer, so a
failed write is a one-line `OutputError` whichever library wrote the file (a full disk says where
and how much room the checkpoint needs), the temporary folder is removed, and the previous
checkpoints stay as they were. Rotation keeps the newest `keep` complete checkpoints plus
milestones, and never deletes the checkpoint the run resumed from or the newest one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from worldtune.atomic import atomic_dump, atomic_dump_path, atomic_write_json, atomic_write_text, output_error
from worldtune.errors import CheckpointError, DiskFullError, OutputError

MARKER = "COMPLETE"
PREFIX = "step-"


def _fsync_dir(path: Path) -> None:
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    for f in path.iterdir():
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(path)


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _rng_to_tensors(state: dict[str, Any]) -> dict[str, Any]:
    """RNG states as tensors and plain lists, so torch.load(weights_only=True) can read them back."""
    np_state = state["numpy"]
    py_state = state["python"]
    out = {"torch": state["torch"],
           "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *[int(x) if not isinstance(x, float) else x for x in np_state[2:]]],
           "python": [py_state[0], torch.tensor(py_state[1], dtype=torch.int64), py_state[2]]}
    if "cuda" in state:
        out["cuda"] = list(state["cuda"])
    return out


def _rng_from_tensors(saved: dict[str, Any]) -> dict[str, Any]:
    npv = saved["numpy"]
    state = {"torch": saved["torch"],
             "numpy": (npv[0], npv[1].numpy().astype(np.uint32), *npv[2:]),
             "python": (saved["python"][0], tuple(int(x) for x in saved["python"][1].tolist()), saved["python"][2])}
    if "cuda" in saved:
        state["cuda"] = saved["cuda"]
    return state


def step_of(path: Path) -> int:
    return int(path.name[len(PREFIX):])


class DamagedCheckpointError(CheckpointError):
    """A checkpoint marked complete whose files cannot be read back (cut, garbage, missing)."""


def _tensor_bytes(obj: Any) -> int:
    """Bytes of the tensors in a (nested) state dict: about the room its file takes on disk."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def _folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def _megabytes(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


class CheckpointManager:
    def __init__(self, run_dir: str | Path, keep: int = 3, milestones: list[int] | None = None):
        self.dir = Path(run_dir) / "checkpoints"
        self.keep = max(1, keep)
        self.milestones = set(milestones or [])
        self.resumed_from: Path | None = None
        self.fail_hook: Callable[[str], None] | None = None  # tests inject crashes mid-save

    def complete(self) -> list[Path]:
        """Complete checkpoints, oldest first."""
        if not self.dir.is_dir():
            return []
        found = [p for p in self.dir.iterdir()
                 if p.is_dir() and p.name.startswith(PREFIX) and (p / MARKER).is_file()]
        return sorted(found, key=step_of)

    def newest(self) -> Path | None:
        done = self.complete()
        return done[-1] if done else None

    def clean_partial(self) -> None:
        """Remove temporary folders left by a save that died (new ones and ones moved aside)."""
        if self.dir.is_dir():
            for p in self.dir.iterdir():
                moved = p.name.startswith(".tmp-replaced-")
                if moved and not (self.dir / p.name[len(".tmp-replaced-"):]).exists():
                    os.replace(p, self.dir / p.name[len(".tmp-replaced-"):])  # killed between the two renames
                elif p.name.startswith(".tmp-"):
                    shutil.rmtree(p, ignore_errors=True)

    def _tmp(self, step: int) -> Path:
        return self.dir / f".tmp-{PREFIX}{step:08d}"

    def begin(self, step: int, needed: int | None = None) -> Path:
        """A fresh temporary folder for the checkpoint of `step` (the same name on every rank)."""
        tmp = self._tmp(step)
        with self._writing(step, needed):
            self.dir.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
        return tmp

    def commit(self, tmp: Path, step: int, state: dict[str, Any], needed: int | None = None) -> Path:
        """Write the run state and RNG, mark complete, fsync, and rename into place; then rotate.

        `needed`: the bytes of the whole checkpoint, for the message of a full disk (default: what `tmp` holds)."""
        aside = self.dir / f".tmp-replaced-{PREFIX}{step:08d}"
        final = self.dir / f"{PREFIX}{step:08d}"
        with self._writing(step, _folder_bytes(tmp) if needed is None else needed):
            atomic_dump(tmp / "rng.pt", lambda f: torch.save(_rng_to_tensors(rng_state()), f))
            atomic_write_json(tmp / "state.json", {**state, "step": step}, default=str)
            self._hook("state")
            atomic_write_text(tmp / MARKER, "ok\n")
            for sub in [tmp, *[d for d in tmp.rglob("*") if d.is_dir()]]:
                _fsync_tree(sub)
            if final.exists():  # a re-save of the same step (e.g. a rerun of a finished run)
                shutil.rmtree(aside, ignore_errors=True)
                os.replace(final, aside)  # atomic: `final` is whole or absent at every instant
                self._hook("aside")
            os.replace(tmp, final)
            _fsync_dir(self.dir)
        shutil.rmtree(aside, ignore_errors=True)
        self.rotate()
        return final

    def save(self, step: int, trainable: dict[str, torch.Tensor], optimizer: dict[str, Any], state: dict[str, Any],
             ema: dict[str, torch.Tensor] | None = None) -> Path:
        """A whole (unsharded) checkpoint, written by one process."""
        from safetensors.torch import save_file

        weights = {k: v.detach().float().contiguous().cpu() for k, v in trainable.items()}
        ema = {k: v.contiguous().cpu() for k, v in ema.items()} if ema is not None else None
        needed = _tensor_bytes(weights) + _tensor_bytes(optimizer) + _tensor_bytes(ema)
        tmp = self.begin(step, needed)
        with self._writing(step, needed):
            atomic_dump_path(tmp / "trainable.safetensors", lambda name: save_file(weights, name))
            self._hook("trainable")
            atomic_dump(tmp / "optimizer.pt", lambda f: torch.save(optimizer, f))
            if ema is not None:
                atomic_dump_path(tmp / "ema.safetensors", lambda name: save_file(ema, name))
        return self.commit(tmp, step, state, needed)

    @contextmanager
    def _writing(self, step: int, needed: int | None) -> Iterator[None]:
        """Writes of `step`'s checkpoint: a failed one removes the temporary folder (so nothing half-written
        remains to be taken for a checkpoint) and stops the run in one line, which for a full disk names the
        folder and the room the checkpoint needs. Anything else (a kill, a bug) passes through untouched."""
        try:
            yield
        except (OSError, OutputError) as e:
            shutil.rmtree(self._tmp(step), ignore_errors=True)
            error = output_error(e, self._tmp(step)) if isinstance(e, OSError) else e
            if isinstance(error, DiskFullError):
                error = self._disk_full(error, step, needed)
            raise error from None

    def _disk_full(self, e: DiskFullError, step: int, needed: int | None) -> DiskFullError:
        """The one line for a full disk: where, how much room the checkpoint needs, and where the rerun resumes."""
        try:
            free = f", {_megabytes(shutil.disk_usage(self.dir).free)} free"
        except OSError:
            free = ""
        room = f"it needs about {_megabytes(needed)}" if needed else "it needs more room"
        newest = self.newest()
        return DiskFullError(f"{e.what} while writing the checkpoint of step {step} in {self.dir}: {room}{free}; free "
                             f"space there and rerun (the run resumes from {newest.name if newest else 'the start'})",
                             e.what)

    def _hook(self, where: str) -> None:
        if self.fail_hook is not None:
            self.fail_hook(where)

    def rotate(self) -> list[Path]:
        """Delete old complete checkpoints beyond `keep`, sparing milestones, the resume source and the newest."""
        done = self.complete()
        spare = set(done[-self.keep:]) | {p for p in done if step_of(p) in self.milestones}
        if self.resumed_from is not None:
            spare.add(self.resumed_from)
        removed = [p for p in done if p not in spare]
        for p in removed:
            shutil.rmtree(p, ignore_errors=True)
        return removed

    def candidates(self, resume: str | None) -> list[Path]:
        """Checkpoints to try in order: 'auto' = every complete one, newest first; a path = just it."""
        if resume == "auto":
            self.clean_partial()
            return self.complete()[::-1]
        source = self.resolve(resume)
        return [source] if source is not None else []

    def resolve(self, resume: str | None) -> Path | None:
        """The checkpoint to resume from: None, 'auto' (newest complete, or none yet) or a path."""
        if resume is None:
            return None
        if resume == "auto":
            self.clean_partial()
            return self.newest()
        path = Path(resume)
        if path.is_dir() and (path / "checkpoints").is_dir():  # a run folder: its newest
            path = CheckpointManager(path).newest() or path
        if not (path / MARKER).is_file():
            raise CheckpointError(f"{path} is not a complete checkpoint (no {MARKER} marker): pass --train.resume auto "
                                  f"or a checkpoints/step-N folder")
        return path

    @staticmethod
    def load(path: Path) -> dict[str, Any]:
        """Everything of an unsharded checkpoint; a sharded one (FSDP) returns state and RNG only.

        Any file that cannot be read back raises `DamagedCheckpointError` naming it."""
        from safetensors.torch import load_file

        def read(name: str, how: Callable[[Path], Any]) -> Any:
            f = path / name
            try:
                return how(f)
            except Exception as e:  # noqa: BLE001 - every reader's own error type means "damaged"
                why = "missing" if not f.exists() else (str(e).splitlines()[0][:120] if str(e) else type(e).__name__)
                raise DamagedCheckpointError(f"{f} cannot be read ({why}): the checkpoint is damaged") from None

        def weights_only(f: Path) -> Any:
            return torch.load(f, map_location="cpu", weights_only=True)

        state = read("state.json", lambda f: json.loads(f.read_text()))
        if not isinstance(state, dict) or not isinstance(state.get("step"), int):
            raise DamagedCheckpointError(f"{path / 'state.json'} has no step: the checkpoint is damaged")
        out: dict[str, Any] = {"state": state, "rng": read("rng.pt", lambda f: _rng_from_tensors(weights_only(f))),
                               "sharded": (path / "dcp").is_dir()}
        if not out["sharded"]:
            out["trainable"] = read("trainable.safetensors", lambda f: load_file(str(f)))
            out["optimizer"] = read("optimizer.pt", weights_only)
            if not isinstance(out["optimizer"], dict) or "state" not in out["optimizer"]:
                raise DamagedCheckpointError(f"{path / 'optimizer.pt'} holds no optimizer state: the checkpoint is "
                                             "damaged")
        if (path / "ema.safetensors").exists():
            out["ema"] = read("ema.safetensors", lambda f: load_file(str(f)))
        return out



# ------------------------------------------------------------------------------------ saving and resuming
def save_sharded(manager: CheckpointManager, step: int, transformer: torch.nn.Module, optimizer,
                 state: Callable[[], dict[str, Any]], dist) -> Path | None:
    """A sharded (FSDP) checkpoint: every process writes its shards (DCP) into one folder, which rank 0 commits
    with the run's `state()`; returns the checkpoint on rank 0."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    tmp = manager.dir / f".tmp-step-{step:08d}"
    if dist.main:
        tmp = manager.begin(step)
    dist.barrier()
    msd, osd = get_state_dict(transformer, optimizer)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(tmp / "dcp"))
    dist.barrier()
    return manager.commit(tmp, step, state()) if dist.main else None


def check_continues(source: Path, state: dict[str, Any], base_fingerprint: str, tc, family) -> None:
    """A one-line error unless checkpoint `source` (its saved `state`) continues this run: the same base model,
    `train.mode`, `train.task` and adapter settings."""
    from worldtune.train.adapters import check_same_adapter

    if state.get("base_fingerprint") != base_fingerprint:
        raise CheckpointError(f"{source} was trained on another base model (fingerprint {state.get('base_fingerprint')} "
                              f"!= {base_fingerprint}): resume with the same model.path/name")
    if state.get("mode") != tc.mode:
        raise CheckpointError(f"{source} is a {state.get('mode')} checkpoint but train.mode={tc.mode}")
    if state.get("task", "video") != tc.task:
        raise CheckpointError(f"{source} is a {state.get('task', 'video')} checkpoint but train.task = "
                              f"{tc.task}: resume with its task, or start a new train.out")
    check_same_adapter(source, state, tc, family)


def saved_world_size(source: Path) -> int | None:
    """How many processes wrote a checkpoint (None where its state.json does not say)."""
    try:
        return json.loads((Path(source) / "state.json").read_text()).get("world_size")
    except (OSError, ValueError):
        return None


def load_sharded(source: Path, transformer: torch.nn.Module, optimizer, sharded: bool) -> None:
    """Load a sharded (FSDP, DCP) checkpoint's model and optimizer state into a sharded run."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    if not sharded:
        raise CheckpointError(f"{source} is a sharded (FSDP) checkpoint: resume with train.fsdp = true, or "
                              f"`worldtune export` it to a consolidated transformer first")
    msd, osd = get_state_dict(transformer, optimizer)
    state = {"model": msd, "optim": osd}
    from worldtune.train.dcp_reader import SafeLoadPlanner, safe_reader

    dcp.load(state, checkpoint_id=str(source / "dcp"), storage_reader=safe_reader(source / "dcp"),
             planner=SafeLoadPlanner())
    set_state_dict(transformer, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def load_whole(source: Path, ck: dict[str, Any], model: torch.nn.Module, optimizer) -> None:
    """Copy a whole checkpoint's trainable tensors into `model` and load its optimizer state; a checkpoint that does
    not fit is damaged (DamagedCheckpointError), one that lacks trainable tensors was made with other settings."""
    named = dict(model.named_parameters())
    missing = [k for k in named if named[k].requires_grad and k not in ck["trainable"]]
    if missing:
        raise CheckpointError(f"{source} lacks {len(missing)} trainable tensors (e.g. {missing[0]}): it was made "
                              f"with other adapter settings (train.lora.*)")
    try:
        with torch.no_grad():
            for k, v in ck["trainable"].items():
                named[k].copy_(v.to(named[k].dtype))
        optimizer.load_state_dict(ck["optimizer"])
    except (KeyError, ValueError, RuntimeError, TypeError) as e:
        raise DamagedCheckpointError(f"{source} does not fit this model's trainable weights or optimizer "
                                     f"({str(e).splitlines()[0][:120] if str(e) else type(e).__name__}): the "
                                     f"checkpoint is damaged") from None
