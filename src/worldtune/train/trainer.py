"""`worldtune train`: the training loop, readable top to bottom.

build data -> build model (+ adapters) -> parallelize -> optimizer and schedule -> resume ->
loop (accumulate, clip, step, log, validate, checkpoint, obey preemption) -> export.

Runs as one process or under torchrun / accelerate launch / SLURM (train/distributed.py). Each
process takes its slice of every global batch, and every sample's noise is seeded by its global
position, so N processes follow the same loss trajectory as one process with the same global batch.

Its parts live beside it, one concept a module: data.py (what a run reads), action_task.py (what an
action task adds), activation_checkpointing.py, checkpoint.py (saving, resuming), metrics.py, export.py.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, NoReturn

import torch
import typer

from worldtune.atomic import append_jsonl, atomic_write_json, atomic_write_text
from worldtune.config import ACTION_TASKS, WorldtuneConfig, dump_config
from worldtune.console import is_terminal, plain, setting_up, summary_table
from worldtune.data.dataset import ShardedSampler
from worldtune.data.frame_size import check_model_frame_size
from worldtune.errors import CheckpointError, ConfigError, DatasetError
from worldtune.lock import OutputLock
from worldtune.models.family import family_of
from worldtune.models.speed import repeated_blocks
from worldtune.train.action_task import ActionTask
from worldtune.train.activation_checkpointing import apply_checkpointing, choose_checkpointing
from worldtune.train.adapters import apply_training_mode, lora_settings, trainable_state_dict
from worldtune.train.checkpoint import (CheckpointManager, DamagedCheckpointError, check_continues, load_sharded,
                                        load_whole, save_sharded, saved_world_size, set_rng_state)
from worldtune.train.data import cache_available, open_data
from worldtune.train.distributed import Dist, shard_fsdp2
from worldtune.train.export import export_run
from worldtune.train.flow import FlowMatchingLoss, flow_loss_from_config, sample_seed
from worldtune.train.metrics import logged_validation, progress_line, startup_notes, trim_metrics
from worldtune.train.preemption import PREEMPTION, REQUEUE_EXIT_CODE
from worldtune.train.schedule import ema_decay, lr_multiplier, warmup_steps
from worldtune.train.validation import validation_components


class Trainer:
    """One training run, built in named steps (data, model and adapters, speed, parallelism,
    optimizer and schedule, checkpointing) and then driven by `fit`."""

    def __init__(self, cfg: WorldtuneConfig):
        from worldtune.models.load import resolve_spec

        self.cfg = cfg
        self.dist = Dist()
        self.out = Path(cfg.train.out)
        self.spec = resolve_spec(cfg.model.name, cfg.model.path, cfg.model.revision)
        self.family = family_of(self.spec)
        torch.manual_seed(cfg.train.seed)
        for build, what in ((self._build_data, "loading data"), (self._build_model_and_adapters, "loading model"),
                            (self._build_speed, "setting up kernels"), (self._build_parallelism, ""),
                            (self._build_optimizer_and_schedule, ""), (self._build_checkpointing, "")):
            with setting_up("train", what, enabled=self.dist.main and bool(what)):  # a log shows what start-up does
                build()
            self._stop_while_building()
        self._check_settings()

    # ------------------------------------------------------------------ build steps
    def _build_data(self) -> None:
        """The cached (or decoded) clips, split into train and held-out sets."""
        tc = self.cfg.train
        self.action = ActionTask(self.cfg, self.spec) if tc.task in ACTION_TASKS else None  # an action task
        self.setup = self.action.setup if self.action is not None else None
        self.cache_mode = cache_available(self.cfg, self.spec)
        self.cache, self.train_set, self.val_set, self.data_info = open_data(self.cfg, self.spec, self.cache_mode,
                                                                             self.setup)
        if len(self.train_set) == 0:
            raise DatasetError(f"{tc.dataset}: no training clips (split='train'"
                               f"{' with cached latents' if self.cache_mode else ''}); check prepare's report")
        check_model_frame_size(self.data_info["height"], self.data_info["width"], self.data_info.get("layout"),
                               self.family.pixel_multiple, self.family.label, f"dataset {tc.dataset} has frames of",
                               "prepare it again with")
        self.fps = self.data_info.get("fps") or self.spec.fps
        self.sampler = ShardedSampler(len(self.train_set), tc.seed, self.dist.rank, self.dist.world)

    def _build_model_and_adapters(self) -> None:
        """The base model (only the transformer when training from the cache), then the trainable parameters."""
        from worldtune.models.load import fingerprint, load_pipeline, load_transformer

        cfg, tc, dev = self.cfg, self.cfg.train, self.dist.device
        self.amp = dev.type == "cuda" and tc.mixed_precision != "no"
        self.amp_dtype = torch.bfloat16 if tc.mixed_precision == "bf16" else torch.float16
        base_dtype = "bf16" if (self.amp and tc.mode != "full") else "fp32"
        load = dict(dtype=base_dtype, seed=cfg.model.seed, revision=cfg.model.revision,
                    random_weights=cfg.model.random_weights)
        if self.cache_mode:
            self.transformer, _ = load_transformer(cfg.model.name, cfg.model.path, device=dev, **load)
            self.pipe = None
        else:
            self.pipe, _ = load_pipeline(cfg.model.name, cfg.model.path, device=str(dev), **load)
            for name in ("text_encoder", "vae"):
                if getattr(self.pipe, name, None) is not None:
                    getattr(self.pipe, name).requires_grad_(False)
            self.transformer = self.pipe.transformer
        self.base_fingerprint = fingerprint(self.transformer)
        # decoded clips: the family's plain kind (the last it lists: raw embeddings, or Cosmos 3's token ids)
        self.text_kind = self.cache.info.get("text_kind", "raw") if self.cache_mode else self.family.text_kinds[-1]
        self._set_aside = self.family.prepare_for_text(self.transformer, self.text_kind)
        if self.action is not None:
            self.action.dyn.check_heads(self.transformer)
        self.params = apply_training_mode(self.transformer, tc.mode, tc.lora, self.family)
        if self.action is not None:
            self.params += self.action.trainable_rows(self.transformer, full=tc.mode == "full")
        self.mv = None  # the multi-view wrapper, when the dataset keeps camera views separate
        if (self.data_info.get("layout") or {}).get("type") == "separate":
            from worldtune.models.multiview import MultiViewTransformer

            roles = self.train_set.roles
            self.mv = MultiViewTransformer(self.transformer, len(roles), attention=tc.view_attention, roles=roles).to(dev)
            self.params += self.mv.extra_parameters()
        self.n_trainable = sum(p.numel() for p in self.params)
        self.ema = ({n: p.detach().float().clone() for n, p in self.transformer.named_parameters()}
                    if tc.mode == "full" and tc.ema else None)

    def _build_speed(self) -> None:
        """Fused kernels, compiled blocks, the attention backend and activation checkpointing."""
        from worldtune.models.memory import uses_selective_checkpointing
        from worldtune.models.speed import apply_selective_checkpointing, apply_speed

        tc, dev = self.cfg.train, self.dist.device
        compile_blocks = tc.compile if tc.compile is not None else dev.type == "cuda"
        self._fused_adaln = tc.fused_adaln and self.family.fused_adaln
        if tc.fp8:  # before compiling and sharding: both must see the float8 layers
            self._float8(dev)
        self.speed = apply_speed(self.transformer, fused_adaln=self._fused_adaln, compile=compile_blocks,
                                 attention=tc.attention_backend)
        n_blocks = len(repeated_blocks(self.transformer))
        if uses_selective_checkpointing(tc.grad_checkpointing, dev.type, tc.memory_auto):  # keep attention outputs
            self.ckpt_blocks = list(range(n_blocks))
            apply_selective_checkpointing(self.transformer, self.ckpt_blocks)
        else:
            # optimizer states (AdamW: 8 B/param) and gradients (4 B) do not exist yet: reserve them
            reserve = 12 * sum(p.numel() for p in self.params)
            self.ckpt_blocks = choose_checkpointing(tc.grad_checkpointing, n_blocks, dev, self._per_block_bytes(),
                                                    reserve_bytes=reserve)
            apply_checkpointing(self.transformer, self.ckpt_blocks)

    def _float8(self, dev: torch.device) -> None:
        """torchao's float8 training for the blocks' linears (models/float8.py), or its one-line refusal."""
        from worldtune.models.float8 import float8_training

        n = float8_training(self.transformer, dev, "train.fp8")
        if self.dist.main:
            print(f"train.fp8: {n} linear layers train with float8 matmuls through torchao")

    def _build_parallelism(self) -> None:
        """FSDP2 sharding or DDP across processes; one process trains the model as is."""
        tc, dev = self.cfg.train, self.dist.device
        self.model = self.mv if self.mv is not None else self.transformer
        self.sharded = bool(tc.fsdp and self.dist.world > 1)
        if self.sharded and self.mv is not None:
            raise ConfigError("train.fsdp is not supported for the multi-view model yet; use data parallelism")
        if self.sharded:
            self.params = shard_fsdp2(self.transformer, self.amp_dtype if self.amp else None, tc.cpu_offload)
        elif self.dist.world > 1:
            self.model = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[dev.index] if dev.type == "cuda" else None)

    def _build_optimizer_and_schedule(self) -> None:
        """AdamW with warmup and decay, and the flow-matching objective."""
        tc = self.cfg.train
        fused = tc.fused_adamw and self.dist.device.type == "cuda" and not tc.cpu_offload
        self.optimizer = torch.optim.AdamW(self.params, lr=tc.lr, betas=tuple(tc.betas), eps=tc.eps,
                                           weight_decay=tc.weight_decay, fused=fused or None)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_multiplier(s, tc.steps, warmup_steps(tc.warmup, tc.steps), tc.f_max, tc.f_min))
        defaults = (self.family.objective_defaults(self.data_info["height"], self.data_info["width"])
                    if self.action is None else self.action.objective_defaults(self.family))
        self.objective: FlowMatchingLoss = flow_loss_from_config(tc, defaults)
        self.flops_per_sample = self._flops_per_sample()

    def _build_checkpointing(self) -> None:
        """Checkpoints, the run's state and its trackers."""
        tc = self.cfg.train
        self.ckpt = CheckpointManager(self.out, tc.checkpoint.keep, tc.checkpoint.milestones)
        self.step = 0
        self._seconds_before, self._t_fit = 0.0, None  # training time of earlier calls (a resumed run), this call's start
        self._saved: tuple[int, Path | None] = (0, None)  # the step whose state a checkpoint holds (0: none needed)
        self._trackers = None
        self._val_steps: set[int] = set()  # steps whose validation row metrics.jsonl already holds
        self._val_parts = None  # the VAE and scheduler of validation videos

    def _check_settings(self) -> None:
        if self.dist.main:  # W&B reachable, slow compilation ahead, a schedule that never leaves warmup
            startup_notes(self.cfg.train, compiled=self.speed["compile"])

    # ------------------------------------------------------------------ helpers
    def _latent_shape(self) -> tuple[int, int, int]:
        """Latent frames (all views stacked), latent height and width of one training sample."""
        f = self.data_info["num_frames"] if self.cache_mode else (self.cfg.train.num_frames or self.data_info["num_frames"])
        layout = self.data_info.get("layout") or {}
        views = len(layout.get("roles") or [0]) if layout.get("type") == "separate" else 1
        t, h, w = self.family.latent_size(f, self.data_info["height"], self.data_info["width"])
        return views * t, h, w

    def _per_block_bytes(self) -> float | None:
        tc = self.cfg.train
        return self.family.per_block_bytes(*self._latent_shape(), batch=tc.batch_size, mode=tc.mode,
                                           fused_adaln=self._fused_adaln, rank=tc.lora.rank)

    def _flops_per_sample(self) -> float | None:
        """Model FLOPs of one sample's step (3 x forward), for MFU."""
        t, h, w = self._latent_shape()
        f = self.family
        return f.train_flops_per_sample(f.vae_temporal * (t - 1) + 1, h * f.vae_spatial, w * f.vae_spatial,
                                        self._fused_adaln)

    def _encode_text(self, prompts: list[str]) -> torch.Tensor:
        """Text conditioning computed on the fly (training from decoded clips), as the cache would store it
        (forward dynamics: `prompts` are tasks, encoded as the action caption)."""
        if self.action is not None:
            return self.action.encode_text(self.pipe, prompts)
        frames = self.cfg.train.num_frames or self.data_info["num_frames"]
        return self.family.encode_prompts(self.pipe, prompts, self.text_kind, num_frames=frames,
                                          height=self.data_info["height"], width=self.data_info["width"], fps=self.fps)

    def _inputs(self, items: list[dict[str, Any]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Clean latents, text and (action tasks) normalised action chunks of dataset items, on the device:
        cached, or encoded here as the cache would encode them."""
        dev = self.dist.device
        actions = torch.stack([it["actions"] for it in items]).to(dev) if self.action is not None else None
        if self.cache_mode:
            x0 = torch.stack([it["latents"] for it in items]).to(dev)
            text = torch.stack([it["text"] for it in items]).to(dev)
            return x0, text, actions
        if self.action is not None:
            x0 = self.action.encode_clips(self.pipe, items).to(dev)
            return x0, self._encode_text([it["task"] for it in items]).to(dev), actions
        from worldtune.models.latents import encode, frames_to_pixels

        pix = torch.stack([frames_to_pixels(it["frames"]) for it in items])
        x0 = encode(self.pipe.vae, pix)
        return x0, self._encode_text([it["prompt"] for it in items]).to(dev), actions

    def _item(self, data, i: int) -> dict[str, Any]:
        """Item `i` of a held-out (or training) set, a decoded clip's window fixed by `i`."""
        return data[i] if self.cache_mode else data.get(i, torch.Generator().manual_seed(i))

    def _batch(self, indices: list[int], positions: list[int],
               micro: int) -> tuple[torch.Tensor, torch.Tensor, list[int], torch.Tensor | None]:
        """Clean latents, text embeddings, per-sample seeds and (action tasks) action chunks of this process's
        micro-batch."""
        tc = self.cfg.train
        gbs = tc.batch_size * self.dist.world
        seeds = [sample_seed(tc.seed, self.step, (micro * gbs) + p) for p in positions]
        if self.cache_mode:
            items = [self.train_set[i] for i in indices]
        else:
            items = [self.train_set.get(i, torch.Generator().manual_seed(s)) for i, s in zip(indices, seeds)]
        x0, text, actions = self._inputs(items)
        return x0, text, seeds, actions

    def _forward_loss(self, x0: torch.Tensor, text: torch.Tensor, seeds: list[int], model=None,
                      actions: torch.Tensor | None = None, modes: list[str] | None = None, **force) -> torch.Tensor:
        """The loss of a micro-batch; an action task's samples each run in a mode (`modes`, else drawn from their
        seeds) that fixes their clean frames and whether their action chunk is denoised and scored."""
        model = model or self.model
        if self.mv is not None:
            from worldtune.models.multiview import multiview_flow_batch, unstack_views

            fb = multiview_flow_batch(self.objective, unstack_views(x0, self.mv.num_views), seeds, **force)
        elif self.action is not None:
            fb, modes = self.action.flow_batch(self.objective, x0, seeds, modes, force)
        else:
            fb = self.objective.prepare(x0, seeds, **force)
        dtype = self.amp_dtype if self.amp else next(self.transformer.parameters()).dtype
        ctx = torch.autocast("cuda", dtype=self.amp_dtype) if self.amp else nullcontext()
        with ctx:
            if self.action is None:
                pred = self.family.predict(model, fb, text, dtype, self.fps)
            else:
                pred, scored = self.action.predict(model, fb, text, actions, seeds, modes, dtype, self.fps)
        if self.action is None:
            return self.objective.loss(pred, fb)
        return self.objective.loss(pred, fb) + self.action.loss(scored)

    # ------------------------------------------------------------------ steps
    def train_step(self) -> dict[str, float]:
        tc = self.cfg.train
        self.model.train()
        t0 = time.perf_counter()
        total = 0.0
        for micro in range(tc.grad_accum):
            indices, positions = self.sampler.next_local(tc.batch_size)
            x0, text, seeds, actions = self._batch(indices, positions, micro)
            sync = micro == tc.grad_accum - 1 or self.dist.world == 1
            ctx = self.model.no_sync() if (not sync and hasattr(self.model, "no_sync")) else nullcontext()
            with ctx:
                loss = self._forward_loss(x0, text, seeds, actions=actions) / tc.grad_accum
                loss.backward()
            total += float(loss.detach())
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, tc.grad_clip if tc.grad_clip > 0 else math.inf)
        if hasattr(grad_norm, "full_tensor"):  # FSDP2: a DTensor
            grad_norm = grad_norm.full_tensor()
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            with torch.no_grad():
                for n, p in self.transformer.named_parameters():
                    self.ema[n].lerp_(p.detach().float(), 1 - ema_decay(tc.ema, self.step))
        self.step += 1
        if self.dist.device.type == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        samples = tc.batch_size * tc.grad_accum * self.dist.world
        row = {"step": self.step, "loss": self.dist.mean(total), "lr": self.scheduler.get_last_lr()[0],
               "grad_norm": float(grad_norm), "step_time": dt, "samples_per_s": samples / dt}
        if self.flops_per_sample and self.dist.device.type == "cuda":
            peak = float(os.environ.get("WORLDTUNE_PEAK_TFLOPS", "790")) * 1e12
            row["mfu"] = self.flops_per_sample * samples / dt / (peak * self.dist.world)
        return row

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Held-out loss at fixed noise levels and fixed noise: comparable across steps and runs. An action task
        scores every mode it trains (inverse dynamics: the action loss) and, for several, each mode apart."""
        tc = self.cfg.train
        data = self.val_set if len(self.val_set) else self.train_set
        n = min(len(data), max(1, tc.val_samples))
        self.model.eval()
        modes = self.action.modes if self.action is not None else (None,)
        per: dict[tuple[float, str | None], list[float]] = {(s, m): [] for s in tc.val_sigmas for m in modes}
        for i in range(n):
            x0, text, actions = self._inputs([self._item(data, i)])
            for j, s in enumerate(tc.val_sigmas):
                for m in modes:
                    loss = self._forward_loss(x0, text, [sample_seed(tc.seed + 1, 0, i * 100 + j)],
                                              model=self.mv or self.transformer, actions=actions,
                                              modes=[m] if m is not None else None, sigma=[s], num_cond=[1])
                    per[(s, m)].append(float(loss))
        by = {k: sum(v) / len(v) for k, v in per.items()}
        out = {f"val_loss@{s:g}": sum(by[(s, m)] for m in modes) / len(modes) for s in tc.val_sigmas}
        out["val_loss"] = sum(out.values()) / len(out)
        if len(modes) > 1:
            out.update({f"val_loss_{m}": sum(by[(s, m)] for s in tc.val_sigmas) / len(tc.val_sigmas) for m in modes})
        return out

    @torch.no_grad()
    def validation_videos(self) -> list[Path]:
        """Generate short videos of held-out clips from their first latent frame, with fixed noise.

        The trainer's own (adapted) transformer samples with the model's scheduler; the VAE is
        loaded only here. The unconditional branch uses zero text embeddings, which is what text
        dropout trains. Files: <run>/val/step-N/<clip>.mp4, comparable from step to step.
        """
        tc = self.cfg.train
        data = self.val_set if len(self.val_set) else self.train_set
        if not tc.val_videos or not self.dist.main or self.sharded or self.mv is not None or len(data) == 0:
            return []  # multi-view runs generate through worldtune.infer.multiview
        if self.action is not None and not self.action.makes_videos:
            return []
        from worldtune.data.video import write_video
        from worldtune.models.latents import decode, initial_noise, pixels_to_frames

        self._val_parts = self._val_parts or validation_components(self.cfg, self.spec, self.pipe, self.dist.device)
        vae, scheduler = self._val_parts  # loaded once, never the text encoder
        dev = self.dist.device
        out = self.out / "val" / f"step-{self.step:08d}"
        out.mkdir(parents=True, exist_ok=True)
        self.transformer.eval()
        written = []
        for i in range(min(tc.val_videos, len(data))):
            item = self._item(data, i)
            x0, text, actions = self._inputs([item])  # decoded clips: encoded with the pipeline's own VAE
            noise = initial_noise(tc.seed + i, tuple(x0.shape)).to(dev)
            ctx = torch.autocast("cuda", dtype=self.amp_dtype) if self.amp else nullcontext()
            with ctx:
                if self.action is None:
                    lat = self.family.sample_from_first_latent(self.transformer, scheduler, x0, text, noise,
                                                               tc.val_steps, tc.val_guidance, self.fps)
                else:  # forward dynamics (also under joint)
                    lat = self.action.sample(self.transformer, scheduler, x0, text, actions, noise, tc.val_steps,
                                             tc.val_guidance, self.fps)
            frames = pixels_to_frames(decode(vae, lat.to(dev))[0])
            path = out / f"{item['clip_id']}.mp4"
            write_video(path, frames, float(self.fps))
            written.append(path)
        return written

    # ------------------------------------------------------------------ state
    def train_seconds(self) -> float:
        """Seconds spent in `fit` over every call of this run (a preempted run resumes and goes on counting)."""
        return self._seconds_before + (time.time() - self._t_fit if self._t_fit is not None else 0.0)

    def state(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler.state_dict(), "sampler": self.sampler.state_dict(),
                "train_seconds": round(self.train_seconds(), 1),
                "base_fingerprint": self.base_fingerprint, "mode": self.cfg.train.mode, "task": self.cfg.train.task,
                **({"action": self.setup.info()} if self.setup is not None else {}),
                "model": self.spec.name, "run": str(self.out.resolve()), "world_size": self.dist.world,
                "config": json.loads(self.cfg.model_dump_json())}

    def save(self) -> Path | None:
        path = None
        if self.sharded:
            path = save_sharded(self.ckpt, self.step, self.transformer, self.optimizer, self.state, self.dist)
        elif self.dist.main:
            path = self.ckpt.save(self.step, trainable_state_dict(self.mv or self.transformer), self.optimizer.state_dict(),
                                  self.state(), self.ema)
        self.dist.barrier()
        self._saved = (self.step, path)
        return path

    def resume(self, source: Path) -> None:
        ck = CheckpointManager.load(source)
        st = ck["state"]
        check_continues(source, st, self.base_fingerprint, self.cfg.train, self.family)
        if ck["sharded"]:
            load_sharded(source, self.transformer, self.optimizer, self.sharded)
        else:
            load_whole(source, ck, self.mv or self.transformer, self.optimizer)
            if self.ema is not None and "ema" in ck:
                self.ema = {k: v.to(self.dist.device) for k, v in ck["ema"].items()}
        self.scheduler.load_state_dict(st["scheduler"])
        self.sampler.load_state_dict(st["sampler"])
        set_rng_state(ck["rng"])
        self.step = int(st["step"])
        self._seconds_before = float(st.get("train_seconds", 0.0))
        self.ckpt.resumed_from = source
        self._saved = (self.step, source)

    # ------------------------------------------------------------------ preemption
    def _stop_while_building(self) -> None:
        """A safe point while the run is built: after a stop signal, exit 42 at once rather than go on loading
        what a scheduler is about to kill. Nothing has been trained, so nothing needs saving."""
        if self.dist.any(PREEMPTION.requested):
            newest = CheckpointManager(self.out).newest()
            self._exit_preempted(f"nothing trained yet, nothing to save (newest checkpoint: {newest or 'none'})",
                                 "while loading")

    def _stop_if_asked(self) -> None:
        """A safe point of the run: after a stop signal, end here with a checkpoint of this step (or say which
        checkpoint already holds it), mark run.json preempted and exit 42. Every process takes the same decision."""
        if not self.dist.any(PREEMPTION.requested):
            return
        step, held_in = self._saved
        if step != self.step:
            what = f"checkpoint {self.save()} saved"
        elif held_in is not None:
            what = f"nothing new to save ({held_in} holds this state)"
        else:
            what = "nothing new to save (no step has run yet)"
        self._write_run_json("preempted", {"signal": PREEMPTION.signal})
        self._exit_preempted(what, f"at step {self.step}")

    def _exit_preempted(self, what: str, when: str) -> NoReturn:
        """Say in one line what the stop left behind, and exit with the code launchers requeue."""
        if self.dist.main:
            plain(f"stopped by {PREEMPTION.signal or 'a signal to another process'} {when}: {what}; run the same "
                  f"command to continue")
        raise typer.Exit(REQUEUE_EXIT_CODE)

    # ------------------------------------------------------------------ run
    def _log(self, row: dict[str, Any]) -> None:
        if not self.dist.main:
            return
        append_jsonl(self.out / "metrics.jsonl", row)
        if self._trackers is not None:
            self._trackers.log(row)

    def _validate_and_log(self) -> dict[str, float]:
        """Held-out loss and videos at this step, logged once (a rerun of a finished run adds no row)."""
        val = self.validate()
        videos = self.validation_videos()
        self._log({"step": self.step, **val})
        self._val_steps.add(self.step)
        if self._trackers is not None:
            self._trackers.videos(self.step, videos)
        return val

    def _write_run_json(self, status: str, extra: dict[str, Any] | None = None) -> None:
        if not self.dist.main:
            return
        run = {"format": "worldtune.run", "version": 1, "status": status, "step": self.step,
               "steps": self.cfg.train.steps, "mode": self.cfg.train.mode, "task": self.cfg.train.task,
               "model": self.spec.name, "model_path": self.cfg.model.path, "model_revision": self.cfg.model.revision,
               "family": self.spec.family, "base_fingerprint": self.base_fingerprint,
               "trainable_params": self.n_trainable, "world_size": self.dist.world,
               "device": str(self.dist.device), "cache": self.cache_mode, "text_kind": self.text_kind,
               "checkpointed_blocks": len(self.ckpt_blocks), "speed": self.speed, "dataset": self.cfg.train.dataset,
               "lora": lora_settings(self.cfg.train, self.family), "objective": dataclasses.asdict(self.objective),
               **(extra or {})}
        atomic_write_json(self.out / "run.json", run, default=str)

    def fit(self) -> dict[str, Any]:
        """Train to `train.steps`, holding the run folder's lock (one live run per folder)."""
        self.out.mkdir(parents=True, exist_ok=True)
        lock = OutputLock(self.out, "train") if self.dist.main else nullcontext()
        with PREEMPTION.held(), lock:
            return self._fit()

    def _resume_newest_readable(self) -> Path | None:
        """Resume from the newest checkpoint that loads; with `auto`, a damaged one falls back to the one before."""
        tc = self.cfg.train
        for source in self.ckpt.candidates(tc.resume):
            try:
                self.resume(source)
                return source
            except DamagedCheckpointError as e:
                if tc.resume != "auto":
                    raise
                if self.dist.main:
                    print(f"warning: {e}; falling back to the previous complete checkpoint")
        return None

    def _fit(self) -> dict[str, Any]:
        tc = self.cfg.train
        source = self._resume_newest_readable()
        if self.dist.main and (source is not None or tc.resume == "auto"):  # rows logged past this step are redone
            self._val_steps = trim_metrics(self.out / "metrics.jsonl", self.step)  # (0: no checkpoint was written)
        if source is not None:
            before = saved_world_size(source)
            if self.dist.main:
                plain(f"resumed from step {self.step} ({source}), world size "
                      f"{before if before is not None else '?'} -> {self.dist.world}")
        elif self.dist.main and tc.resume != "auto" and (self.out / "metrics.jsonl").exists():  # a new run
            if tc.resume is None and self.ckpt.complete():
                raise CheckpointError(f"{self.out} already holds checkpoints of a run: pass --train.resume auto to "
                                      f"continue it, or choose another train.out")
            (self.out / "metrics.jsonl").unlink()
        if self.dist.main:
            config_toml = dump_config(self.cfg)
            atomic_write_text(self.out / "config.toml", config_toml)
            if tc.tensorboard or tc.wandb:
                from worldtune.train.trackers import Trackers

                self._trackers = Trackers(self.out, self.cfg.model_dump(mode="json"), config_toml,
                                          tensorboard=tc.tensorboard, wandb=tc.wandb, project=tc.wandb_project)
        self._write_run_json("running", {"resumed_from": str(source) if source else None})
        self._stop_if_asked()  # a signal while resuming: the checkpoint just loaded holds this state
        self._t_fit = t_start = time.time()
        first_loss, last_loss, val = None, None, {}
        lines = self.dist.main and not is_terminal()  # a log file: plain lines instead of a bar
        start_step = self.step
        try:
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            cols = [TextColumn("train"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TextColumn("{task.fields[info]}"), TimeRemainingColumn()]
            with Progress(*cols, disable=not self.dist.main or lines, transient=False) as bar:
                task = bar.add_task("train", total=tc.steps, completed=self.step, info="")
                while self.step < tc.steps:
                    row = self.train_step()
                    first_loss = row["loss"] if first_loss is None else first_loss
                    last_loss = row["loss"]
                    if self.step % tc.log_every == 0 or self.step == tc.steps:
                        self._log(row)
                        if lines:
                            plain(progress_line(row, tc.steps, (time.time() - t_start) / max(1, self.step - start_step)))
                    if tc.val_every and self.step % tc.val_every == 0 and self.step < tc.steps:
                        val = self._validate_and_log()
                    info = f"loss {row['loss']:.4f} lr {row['lr']:.2e} {row['step_time']:.2f}s/step"
                    if "mfu" in row:
                        info += f" MFU {row['mfu']:.0%}"
                    bar.update(task, completed=self.step, info=info)
                    periodic = tc.checkpoint.every and self.step % tc.checkpoint.every == 0
                    if periodic and self.step < tc.steps:
                        self.save()
                    self._stop_if_asked()
            if self.step in self._val_steps:  # a rerun of a finished run: its last validation is logged already
                val = logged_validation(self.out / "metrics.jsonl", self.step)
            else:
                val = self._validate_and_log()
            videos = sorted((self.out / "val" / f"step-{self.step:08d}").glob("*.mp4"))
            self._stop_if_asked()  # saves the last step; the rerun finds its validation logged
            final = self.save()
            self._stop_if_asked()  # the last checkpoint holds everything; the rerun exports
            export = self.export()
            self._stop_if_asked()  # all written: nothing left to save
        finally:
            if self._trackers is not None:
                self._trackers.close()
        summary = {"run": str(self.out), "steps": self.step, "first_loss": first_loss, "last_loss": last_loss,
                   **val, "val_videos": len(videos), "checkpoint": str(final) if final else None, "export": str(export) if export else None,
                   "seconds": round(time.time() - t_start, 1), "train_seconds": round(self.train_seconds(), 1),
                   "resumed_at_step": start_step or None, "trainable_params": self.n_trainable}
        self._write_run_json("done", {"summary": summary})
        return summary

    def export(self) -> Path | None:
        """Diffusers files beside the run: LoRA weights with metadata, or a transformer folder."""
        return export_run(self.out / "export", self.transformer, self.cfg, self.spec, self.base_fingerprint,
                          set_aside=self._set_aside, ema=self.ema, action=self.setup.info() if self.setup is not None else None,
                          mv=self.mv, sharded=self.sharded, dist=self.dist)

def run(cfg: WorldtuneConfig) -> dict[str, Any]:
    """Entry point of `worldtune train`."""
    with PREEMPTION.held():  # (the CLI holds it already, from its first instruction)
        trainer = Trainer(cfg)
        summary = trainer.fit()
        if trainer.dist.main:
            from worldtune.train.curves import loss_plot

            loss_plot(trainer.out)
            summary_table(f"worldtune train: {cfg.train.mode} on {trainer.spec.name}", summary)
        if trainer.dist.any(PREEMPTION.requested):  # a signal after the last save: the run is done all the same
            trainer._exit_preempted(f"the run had finished, nothing to save ({summary['checkpoint']} and "
                                    f"{summary['export']} are written)", "after the last step")
        trainer.dist.close()
    return summary
