"""`worldtune idm train`: an inverse-dynamics model trained from scratch on a LeRobot dataset.

Reads top to bottom: load every episode's cameras and actions -> hold out whole episodes ->
normalise actions with the training episodes' mean and std -> build the model -> resume if asked ->
loop (sample windows, MSE on normalised action chunks, clip, step, log, checkpoint) -> label the
held-out episodes exactly as generated videos are labelled and compare with two baselines ->
write the model (`<out>/idm/`) and `idm_report.json`.

The run machinery is the DiT trainer's: `Dist` (one process or torchrun; gradients averaged by
DDP), `ShardedSampler` (the global batch is the same sequence of windows for any number of
processes, and its position is two integers a checkpoint stores), `CheckpointManager` (atomic,
rotated, exact resume; metrics.jsonl cut back to the resumed step), `OutputLock` (one run per
folder), `PREEMPTION` (SIGTERM or SIGUSR1: checkpoint at the next safe point, exit 42, up to the end of the
run) and a progress bar.
"""

from __future__ import annotations

import json
import math
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch
import typer

from worldtune.atomic import append_jsonl, rewrite_jsonl
from worldtune.config import WorldtuneConfig, dump_config
from worldtune.console import Progress, setting_up
from worldtune.data.dataset import ShardedSampler
from worldtune.data.lerobot import LeRobotDataset
from worldtune.errors import CheckpointError, DatasetError
from worldtune.idm.data import ActionEpisode, action_names, load_episodes, split_episodes
from worldtune.idm.label import ActionLabeler, resolve_device
from worldtune.idm.model import InverseDynamicsModel, architecture, save_idm, window_indices
from worldtune.idm.scores import CONSTANT_STD, constant_entries, normalised_errors
from worldtune.lock import OutputLock
from worldtune.train.checkpoint import CheckpointManager, set_rng_state
from worldtune.train.preemption import PREEMPTION, REQUEUE_EXIT_CODE
from worldtune.train.trainer import Dist

REPORT = "idm_report.json"


# ------------------------------------------------------------------------------------ report
def gripper_of(names: list[str], train_actions: np.ndarray) -> dict[str, Any] | None:
    """The gripper entry (first name containing "gripper") and its open/closed threshold: the midpoint
    of its training range (a gripper command is bimodal, so the midpoint separates the modes)."""
    i = next((k for k, n in enumerate(names) if "gripper" in n.lower()), None)
    if i is None:
        return None
    col = train_actions[:, i]
    return {"index": i, "name": names[i], "threshold": float((col.min() + col.max()) / 2)}


def held_out_report(truths: list[np.ndarray], preds: list[np.ndarray], mean: np.ndarray, std: np.ndarray,
                    names: list[str], gripper: dict[str, Any] | None) -> dict[str, Any]:
    """MSE / MAE per action entry of the IDM and two baselines on held-out episodes, plus gripper accuracy.

    Baselines: `mean_action` predicts the training mean everywhere; `previous_action` is an ORACLE: it
    predicts the true previous action (the mean at an episode's first frame), which no labeller of a
    video has, so it bounds what smooth motion allows rather than competing with the IDM.
    `normalised_mse` is the mean over the entries that vary in training of MSE / std^2 (`std`: the
    training std, 0 for constant entries), so entries of any scale weigh the same (idm/scores.py).
    """
    truth = np.concatenate(truths)
    predictors = {
        "idm": np.concatenate(preds),
        "mean_action": np.broadcast_to(mean, truth.shape),
        "previous_action": np.concatenate([np.vstack([mean[None], t[:-1]]) for t in truths]),
    }
    out: dict[str, Any] = {}
    for name, p in predictors.items():
        err = p - truth
        mse, mae = (err ** 2).mean(0), np.abs(err).mean(0)
        row: dict[str, Any] = {"mse": dict(zip(names, mse.tolist())), "mae": dict(zip(names, mae.tolist())),
                               **normalised_errors(mse, mae, std)}
        if gripper is not None:
            i, thr = gripper["index"], gripper["threshold"]
            row["gripper_accuracy"] = float(((p[:, i] > thr) == (truth[:, i] > thr)).mean())
        out[name] = row
    return out


# ------------------------------------------------------------------------------------ trainer
class IdmTrainer:
    def __init__(self, cfg: WorldtuneConfig) -> None:
        ic = self.ic = cfg.idm
        self.cfg = cfg
        self.dist = Dist()
        self.device = self.dist.device if ic.device == "auto" else resolve_device(ic.device)
        self.out = Path(ic.out)
        ds = LeRobotDataset(ic.dataset)
        self.dataset = ds
        self.names = action_names(ds, ic.action_key)
        with setting_up("idm train", f"loading the episodes of {ds.root}", enabled=self.dist.main):
            episodes, self.skipped = load_episodes(ds, ic.cameras, ic.action_key, (ic.view_height, ic.view_width),
                                                   ic.resize, ic.max_episodes)
        train_pos, val_pos = split_episodes(len(episodes), ic.val_fraction, ic.seed)
        self.train_eps: list[ActionEpisode] = [episodes[i] for i in train_pos]
        self.val_eps: list[ActionEpisode] = [episodes[i] for i in val_pos]
        acts = np.concatenate([e.actions for e in self.train_eps])
        if acts.shape[1] != len(self.names):
            raise DatasetError(f"{ds.root}: actions have {acts.shape[1]} entries but info.json names {len(self.names)}: "
                               f"fix the '{ic.action_key}' feature's names")
        self.mean = acts.mean(0)
        self.train_std = acts.std(0)  # 0 for a constant entry: left out of the normalised errors
        self.std = np.where(self.train_std > CONSTANT_STD, self.train_std, 1.0).astype(np.float32)
        self.gripper = gripper_of(self.names, acts)

        torch.manual_seed(ic.seed)
        self.model = InverseDynamicsModel(len(ic.cameras), ic.horizon + 1, ic.horizon, len(self.names), ic.channels)
        self.model.action_mean.copy_(torch.from_numpy(self.mean))
        self.model.action_std.copy_(torch.from_numpy(self.std))
        self.model.to(self.device)
        self.net: torch.nn.Module = self.model
        if self.dist.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            self.net = DistributedDataParallel(self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=ic.lr, weight_decay=ic.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.starts = [(k, t) for k, e in enumerate(self.train_eps) for t in range(e.length)]
        self.sampler = ShardedSampler(len(self.starts), ic.seed, self.dist.rank, self.dist.world)
        self.ckpt = CheckpointManager(self.out, ic.checkpoint.keep, ic.checkpoint.milestones)
        self.step = 0
        self.fingerprint = {"dataset": str(ds.root.resolve()), "action_key": ic.action_key, "action_names": self.names,
                            "cameras": dict(ic.cameras), "size": [ic.view_height, ic.view_width], "resize": ic.resize,
                            "horizon": ic.horizon, "channels": ic.channels, "seed": ic.seed,
                            "val_fraction": ic.val_fraction, "max_episodes": ic.max_episodes}

    def _lr_factor(self, step: int) -> float:
        """Linear warmup, then cosine decay to 10% of the peak at the last step."""
        ic = self.ic
        if step < ic.warmup:
            return (step + 1) / ic.warmup
        progress = min(1.0, (step - ic.warmup) / max(1, ic.steps - ic.warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    def _batch(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 windows [B, V, F, h, w, 3] and actions [B, H, D] of window starts `indices`."""
        xs, ys = [], []
        for i in indices:
            k, t = self.starts[i]
            e = self.train_eps[k]
            fidx, aidx = window_indices(np.array([t]), e.length, self.ic.horizon)
            xs.append(e.views[:, fidx[0]])
            ys.append(e.actions[aidx[0]])
        x = torch.from_numpy(np.stack(xs)).to(self.device)
        return x, torch.from_numpy(np.stack(ys)).to(self.device)

    def train_step(self) -> dict[str, float]:
        t0 = time.time()
        self.net.train()
        idx, _ = self.sampler.next_local(self.ic.batch_size)
        x, y = self._batch(idx)
        loss = torch.nn.functional.mse_loss(self.net(x), self.model.normalize(y))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.ic.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return {"step": self.step, "loss": self.dist.mean(float(loss.detach())), "grad_norm": float(norm),
                "lr": self.scheduler.get_last_lr()[0], "step_time": time.time() - t0}

    # ------------------------------------------------------------------ state
    def save(self) -> Path | None:
        path = None
        if self.dist.main:
            state = {"scheduler": self.scheduler.state_dict(), "sampler": self.sampler.state_dict(),
                     "fingerprint": self.fingerprint, "world_size": self.dist.world,
                     "config": json.loads(self.ic.model_dump_json())}
            path = self.ckpt.save(self.step, self.model.state_dict(), self.optimizer.state_dict(), state)
        self.dist.barrier()
        return path

    def resume(self, source: Path) -> None:
        ck = CheckpointManager.load(source)
        st = ck["state"]
        if st.get("fingerprint") != self.fingerprint:
            diff = sorted(k for k in self.fingerprint if (st.get("fingerprint") or {}).get(k) != self.fingerprint[k])
            raise CheckpointError(f"{source} was trained with other idm settings or data ({', '.join(diff)} differ): "
                                  f"resume with the same [idm] config, or choose another idm.out")
        self.model.load_state_dict({k: v.to(self.device) for k, v in ck["trainable"].items()})
        self.optimizer.load_state_dict(ck["optimizer"])
        self.scheduler.load_state_dict(st["scheduler"])
        self.sampler.load_state_dict(st["sampler"])
        set_rng_state(ck["rng"])
        self.step = int(st["step"])
        self.ckpt.resumed_from = source

    def meta(self) -> dict[str, Any]:
        """idm.json: what labelling needs (architecture, cameras, actions) and where the model came from."""
        ic, ds = self.ic, self.dataset
        return {"architecture": architecture(self.model, ic.channels, ic.view_height, ic.view_width),
                "cameras": dict(ic.cameras), "resize": ic.resize, "action_key": ic.action_key,
                "action_names": self.names, "action_mean": self.mean.tolist(), "action_std": self.std.tolist(),
                "gripper": self.gripper, "fps": ds.fps, "step": self.step,
                "dataset": {"path": str(ds.root.resolve()), "robot_type": ds.info.get("robot_type"),
                            "episodes": len(self.train_eps) + len(self.val_eps)}}

    # ------------------------------------------------------------------ run
    def evaluate(self) -> dict[str, Any]:
        """Label each held-out episode as export labels a generated video; compare with the baselines."""
        self.model.eval()
        labeler = ActionLabeler(self.model, self.meta(), self.ic.label_batch)
        preds = [labeler.label_prepared(e.views) for e in self.val_eps]
        metrics = held_out_report([e.actions for e in self.val_eps], preds, self.mean, self.train_std, self.names,
                                  self.gripper)
        idm, base = metrics["idm"]["normalised_mse"], metrics["mean_action"]["normalised_mse"]
        return {"format": "worldtune.idm_report", "version": 1, "dataset": str(self.dataset.root),
                "step": self.step, "action_names": self.names, "gripper": self.gripper,
                "episodes": {"train": [e.index for e in self.train_eps], "held_out": [e.index for e in self.val_eps]},
                "held_out_frames": int(sum(e.length for e in self.val_eps)), "skipped_episodes": self.skipped,
                "constant_entries": constant_entries(self.train_std, self.names), "metrics": metrics,
                "mse_reduction_vs_mean_action": 1.0 - idm / base if idm is not None and base else None}

    def _log(self, row: dict[str, Any]) -> None:
        if self.dist.main:
            append_jsonl(self.out / "metrics.jsonl", row)

    def _stop_if_asked(self, saved: int | None) -> None:
        """A safe point: after a stop signal (SIGTERM, SIGUSR1), save this step's checkpoint unless `saved` (the
        step last checkpointed) is this one, say so in one line and exit with the code launchers requeue."""
        if not self.dist.any(PREEMPTION.requested):
            return
        if saved == self.step == self.ic.steps:
            what = (f"checkpoint of step {self.step} already saved, the held-out episodes not labelled yet; run the "
                    "same command with --idm.resume auto to label them")
            self._exit_preempted(f"after the last step: {what}")
        if self.step == 0:
            what = "nothing trained yet, nothing to save"
        elif saved == self.step:
            what = f"checkpoint of step {self.step} already saved"
        else:
            what = f"checkpoint {self.save()} saved"
        self._exit_preempted(f"at step {self.step}: {what}; run the same command with --idm.resume auto to continue")

    def stop_if_asked_when_done(self, summary: dict[str, Any]) -> None:
        """The last safe point, once everything is written: a stop signal that came during the held-out labelling or
        the report (both run to their end) still exits with the requeue code, as from any other moment of the run."""
        if self.dist.any(PREEMPTION.requested):
            self._exit_preempted(f"after the last step {self.step}: the run had finished, nothing to save "
                                 f"({summary.get('idm')} and {summary.get('report')} are written)")

    def _exit_preempted(self, when_what: str) -> NoReturn:
        """Say in one line when the stop came and what it left behind, and exit with the code launchers requeue."""
        if self.dist.main:
            print(f"stopped by {PREEMPTION.signal or 'a signal to another process'} {when_what}", flush=True)
        raise typer.Exit(REQUEUE_EXIT_CODE)

    def fit(self) -> dict[str, Any]:
        """Train to `idm.steps`, holding the run folder's lock (one live run per folder) and noting stop signals."""
        self.out.mkdir(parents=True, exist_ok=True)
        lock = OutputLock(self.out, "idm") if self.dist.main else nullcontext()
        with PREEMPTION.held(), lock:
            return self._fit()

    def _fit(self) -> dict[str, Any]:
        ic = self.ic
        source = self.ckpt.resolve(ic.resume)
        if source is not None:
            self.resume(source)
            if self.dist.main and (self.out / "metrics.jsonl").exists():  # rows past the checkpoint are redone
                rewrite_jsonl(self.out / "metrics.jsonl", lambda r: isinstance(r, dict) and r.get("step", 0) <= self.step)
        elif self.dist.main and (self.out / "metrics.jsonl").exists():
            if self.ckpt.complete():
                raise CheckpointError(f"{self.out} already holds checkpoints of an IDM run: pass --idm.resume auto to "
                                      f"continue it, or choose another idm.out")
            (self.out / "metrics.jsonl").unlink()
        if self.dist.main:
            (self.out / "config.toml").write_text(dump_config(self.cfg.idm))
        t_start, first, last = time.time(), None, None
        saved = self.step if source is not None else None
        self._stop_if_asked(saved)  # a signal while the episodes loaded
        with Progress("idm train", ic.steps, "steps", completed=self.step, enabled=self.dist.main) as bar:
            while self.step < ic.steps:
                row = self.train_step()
                first = row["loss"] if first is None else first
                last = row["loss"]
                if self.step % ic.log_every == 0 or self.step == ic.steps:
                    self._log(row)
                bar.info(f"loss {row['loss']:.4f}")
                bar.advance()
                if ic.checkpoint.every and self.step % ic.checkpoint.every == 0 and self.step < ic.steps:
                    self.save()
                    saved = self.step
                self._stop_if_asked(saved)
        final = self.save()
        self._stop_if_asked(self.step)  # a signal in the last steps or the last save: label on the rerun
        summary: dict[str, Any] = {"run": str(self.out), "steps": self.step, "first_loss": first, "last_loss": last,
                                   "checkpoint": str(final) if final else None,
                                   "seconds": round(time.time() - t_start, 1)}
        if self.dist.main:
            with setting_up("idm train", f"labelling {len(self.val_eps)} held-out episodes"):
                report = self.evaluate()
            m = report["metrics"]
            self._log({"step": self.step, **{f"held_out_{k}_normalised_mse": v["normalised_mse"] for k, v in m.items()}})
            (self.out / REPORT).write_text(json.dumps(report, indent=1) + "\n")
            save_idm(self.out / "idm", self.model, self.meta())
            summary.update(idm=str(self.out / "idm"), report=str(self.out / REPORT),
                           mse_reduction_vs_mean_action=report["mse_reduction_vs_mean_action"])
            print_report(report)
        self.dist.barrier()
        return summary


PREDICTOR_LABELS = {"idm": "IDM", "mean_action": "mean action (baseline)",
                    "previous_action": "previous action (ORACLE)"}


def print_report(report: dict[str, Any]) -> None:
    """The held-out tables: per predictor the normalised MSE (and gripper accuracy), then per action entry the MSE
    of each predictor (a row per entry, so 7-D actions fit a log's 80 columns as well as 3-D ones)."""
    from rich.console import Console
    from rich.table import Table

    m = report["metrics"]
    constant = set(report.get("constant_entries") or [])
    console = Console()
    table = Table(title=f"IDM on {len(report['episodes']['held_out'])} held-out episodes "
                        f"({report['held_out_frames']} frames)")
    table.add_column("predictor")
    table.add_column("normalised MSE", justify="right")
    if report["gripper"]:
        table.add_column("gripper acc.", justify="right")
    for name, row in m.items():
        nmse = row["normalised_mse"]
        cells = ["—" if nmse is None else f"{nmse:.3f}"]
        if report["gripper"]:
            cells.append(f"{row['gripper_accuracy']:.1%}")
        table.add_row(PREDICTOR_LABELS.get(name, name), *cells)
    console.print(table)
    per = Table(title="MSE per action entry")
    per.add_column("entry")
    for name in m:
        per.add_column(PREDICTOR_LABELS.get(name, name), justify="right")
    for n in report["action_names"]:
        per.add_row(n + (" (constant)" if n in constant else ""), *[f"{row['mse'][n]:.3g}" for row in m.values()])
    console.print(per)
    console.print("  previous action is an oracle: it is given the true previous action, which no labeller of a "
                  "generated video has; it shows how smooth the motion is, not a rival to the IDM")
    varying = len(report["action_names"]) - len(constant)
    console.print(f"  normalised MSE: mean of MSE / training variance over the {varying} entries that vary"
                  + (f"; constant in training, left out: {', '.join(sorted(constant))}" if constant else ""))


def run(cfg: WorldtuneConfig) -> dict[str, Any]:
    """Entry point of `worldtune idm train`: stop signals are noted while the episodes load, too (the CLI holds
    them from its first instruction)."""
    with PREEMPTION.held():
        trainer = IdmTrainer(cfg)
        summary = trainer.fit()
        trainer.stop_if_asked_when_done(summary)
        trainer.dist.close()
    return summary
