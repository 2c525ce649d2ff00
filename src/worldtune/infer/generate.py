"""`worldtune generate`: videos from (first frame, prompt) pairs, for a base model and its adapters.

Reads top to bottom as the run goes:

1. list the inputs (folder / JSONL / prepared dataset) and take this process's shard;
2. load the base model once; check every adapter against it (before anything is generated);
3. plan (model x input x seed), drop what a previous run already finished (resume);
4. encode each unique prompt once, park the text encoder on the CPU;
5. for each model variant: switch adapter, generate every pending video, write mp4 (+ camera
   views, + ground truth) atomically, append its row;
6. write the baselines (infer/baselines.py: the first frame held, the real clip through the VAE) once per
   input, with a row per seed like a model's;
7. merge the per-process rows into generations.jsonl and print a summary.

The initial noise of a seed is drawn on the CPU with its own torch.Generator and moved to the
device, so a seed gives the same noise on any machine and for every model variant: differences
between variants are the model's, not the noise's. The on-disk format is in infer/records.py
and docs/generate.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from worldtune.config import GenerateConfig, WorldtuneConfig
from worldtune.console import Progress, plain, setting_up
from worldtune.errors import ConfigError, DatasetError, GenerationError
from worldtune.infer import baselines, records
from worldtune.infer.adapters import AdapterFile, activate, check_adapter, load_adapters
from worldtune.infer.decode_queue import DecodeQueue
from worldtune.infer.inputs import GenerationInput, InputSet, load_condition, load_view_conditions, read_inputs
from worldtune.infer.multiview import check_adapters_for_views, denoise_views, mosaic, separate_roles, view_model
from worldtune.infer.prompts import PromptEmbeddings
from worldtune.infer.sharding import process_index, shard
from worldtune.infer.views import layout_roles, split_views
from worldtune.lock import OutputLock
from worldtune.models.family import family_of
from worldtune.models.latents import initial_noise, to_uint8
from worldtune.names import safe_name

BASE_LABEL = "base"
SPEED_SETTINGS = ("sampler", "batch_guidance", "compile", "fused_adaln", "device")  # recorded, not in the hash


@dataclass(frozen=True)
class Settings:
    """Every sampling setting of a run, resolved from the config, the inputs and the model spec."""

    mode: str
    height: int
    width: int
    num_frames: int
    fps: float
    steps: int
    guidance: float
    negative_prompt: str | None  # None: the pipeline's own default (Cosmos 3)
    cond_latent_frames: int
    cond_timestep: float
    resize: str
    max_sequence_length: int
    sampler: str  # "worldtune" (models/predict_sampler.py), "pipeline" (the diffusers call) or "multiview" (infer/multiview.py)
    batch_guidance: bool  # worldtune sampler: both guidance branches in one DiT call
    dtype: str
    device: str
    compile: bool
    fused_adaln: bool
    fp8: bool = False  # float8 matmuls (models/float8.py): other frames, so part of each output's hash

    @property
    def cond_pixel_frames(self) -> int:
        return 4 * (self.cond_latent_frames - 1) + 1

    # the step cache's label (models/step_cache.py): other frames, so part of the hash when on
    cache: str | None = None


@dataclass(frozen=True)
class Variant:
    """One model to generate with: the base (adapter None) or the base plus one adapter; or a baseline
    (infer/baselines.py), which the model does not make."""

    label: str
    adapter: AdapterFile | None = None
    baseline: bool = False


@dataclass(frozen=True)
class Job:
    variant: Variant
    item: GenerationInput
    seed: int
    params_hash: str


# ------------------------------------------------------------------------------------ entry point
def run(cfg: WorldtuneConfig) -> Path:
    """Generate every (model, input, seed) of the config that is not done yet; returns the out folder."""
    g = cfg.generate
    rank, world, local_rank = process_index()
    device = _device(g.device, local_rank)
    inputs = read_inputs(g.inputs, g.mode, g.split)
    items = sorted(inputs.items, key=lambda i: i.name)[: g.max_inputs] if g.max_inputs else inputs.items
    mine = shard(items, rank, world, key=lambda i: i.name)

    stage = "generate" if world == 1 else f"generate rank {rank}"
    with setting_up(stage, "loading model"):
        pipe, spec = _load_model(cfg, device)
    family = family_of(spec)
    if g.mode not in family.modes:
        raise GenerationError(f"{spec.name}: this model has no {g.mode} mode; use one of {', '.join(family.modes)}")
    layout = g.layout if g.layout is not None else inputs.layout
    roles = separate_roles(layout)  # camera views kept separate: the multi-view model
    if roles and not family.multiview:
        raise GenerationError(f"{spec.name}: multi-view generation (separate-views inputs) needs a Cosmos-Predict2.5 model")
    adapters = _check_adapters(g, pipe.transformer, family)  # before anything is generated
    check_adapters_for_views(adapters, roles)
    variants = _variants(g, adapters)
    settings = _settings(g, spec, inputs, pipe, device, multiview=bool(roles))
    base_fp = _fingerprint(pipe.transformer)
    vae_fp = _fingerprint(pipe.vae) if "vae_round_trip" in g.baselines else None

    out = Path(g.out)
    with OutputLock(out, "generate", name=f".worldtune-rank{rank}.lock"):  # one live run per folder and rank
        records.write_info(out, layout, settings.fps,
                           str(Path(inputs.source).resolve()) if inputs.kind == "dataset" else None)
        records.start_rank(out, rank)
        done = records.all_rows(out)
        jobs, resumed = _plan(out, g, variants, mine, settings, base_fp, done, cfg)
        base_jobs, base_resumed, absent = _plan_baselines(out, g, mine, settings, vae_fp, done)

        _print_plan(inputs, mine, variants, jobs, resumed, rank, world, settings, g.baselines, base_jobs, base_resumed)
        stats: dict[str, Counter] = {label: Counter() for label in [v.label for v in variants] + list(g.baselines)}
        for job in resumed + base_resumed:
            stats[job.variant.label]["resumed"] += 1
        if jobs:
            embeds = PromptEmbeddings(pipe, family, settings.max_sequence_length)
            negative = [settings.negative_prompt] if settings.guidance > 1 and settings.negative_prompt is not None else []
            prompts = [j.item.prompt for j in jobs] + negative
            with setting_up(stage, f"encoding {len(set(prompts))} prompts"):
                embeds.encode_all(prompts, device)
            if adapters:
                with setting_up(stage, f"loading {len(adapters)} adapters"):
                    load_adapters(pipe.transformer, adapters)
            _speed_up(pipe.transformer, g, settings, family.compile_dynamic)
            _step_cache(pipe.transformer, g, settings)
            _speed_up_vae(pipe.vae, g, device)
            if settings.compile:
                plain(f"{stage}: torch.compile is on: the first video of each shape compiles the model first")
            _generate_all(pipe, spec, jobs, settings, embeds, out, rank, layout if g.split_views or roles else None,
                          base_fp, cfg, stats, bool(adapters), stage)
        if base_jobs:
            _write_baselines(pipe, base_jobs, settings, out, rank, layout if g.split_views or roles else None, cfg,
                             stats, done, vae_fp)
        if records.finish_rank(out, rank, world):
            print(f"merged rows into {out / records.MERGED}")
    _print_summary(stats, inputs.skipped, out, absent)
    return out


# ----------------------------------------------------------------------------------- model set-up
def _device(name: str, local_rank: int) -> torch.device:
    if name == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(name)


def _load_model(cfg: WorldtuneConfig, device: torch.device):
    """The base pipeline (bf16 on CUDA, fp32 on CPU), with a full fine-tuned transformer swapped in if given."""
    from worldtune.models.load import load_pipeline

    dtype = cfg.model.dtype if device.type == "cuda" else "fp32"
    pipe, spec = load_pipeline(cfg.model.name, cfg.model.path, dtype=dtype, device="cpu", seed=cfg.model.seed,
                               vae_dtype=dtype, revision=cfg.model.revision, random_weights=cfg.model.random_weights,
                               keep_fp32_modules=True)
    if cfg.generate.transformer:
        finetuned = _load_finetuned(cfg.generate.transformer, pipe.transformer, family_of(spec), dtype)
        pipe.register_modules(transformer=finetuned)
    pipe.transformer.to(device)
    pipe.vae.to(device)
    pipe.set_progress_bar_config(disable=True)
    return pipe, spec


def _load_finetuned(path: str, base: torch.nn.Module, family, dtype: str) -> torch.nn.Module:
    """A full fine-tuned transformer folder, checked to be the same architecture as the base model's."""
    from worldtune.models.load import DTYPES, cast_as_pretrained

    root = Path(path)
    sub = "transformer" if (root / "transformer" / "config.json").is_file() else None
    if not (root / (sub or "") / "config.json").is_file():
        raise GenerationError(f"generate.transformer={root}: no config.json (a transformer folder from `worldtune export --fuse`)")
    try:
        model = family.transformer_type().from_pretrained(root, subfolder=sub, local_files_only=True)
    except (OSError, ValueError) as e:
        raise GenerationError(f"generate.transformer={root}: cannot load ({str(e).splitlines()[0]})") from None
    diff = [k for k, v in base.config.items() if not k.startswith("_") and k in model.config and model.config[k] != v]
    if diff:
        raise GenerationError(f"generate.transformer={root}: {diff[0]}={model.config.get(diff[0])} but the base model "
                              f"has {base.config.get(diff[0])}; use a transformer fine-tuned from model.name/path")
    return cast_as_pretrained(model, DTYPES[dtype])


def _fingerprint(transformer: torch.nn.Module) -> str:
    from worldtune.models.load import fingerprint

    return fingerprint(transformer)


def adapter_label(path: str | Path) -> str:
    """The default model label of an adapter: its run's name for a run's `export/` folder (so two
    runs' adapters never collide), else the folder's (or file's) name."""
    p = Path(path).resolve()
    if p.is_file():
        p = p.parent
    return _label(p.parent.name if p.name == "export" else p.name)


def _check_adapters(g: GenerateConfig, transformer: torch.nn.Module, family) -> list[AdapterFile]:
    checked = [check_adapter(a.path, transformer, _label(a.name) if a.name else adapter_label(a.path), a.scale,
                             family.adapter_info()) for a in g.adapters]
    if g.fuse and len(checked) != 1:
        raise GenerationError(f"generate.fuse=true merges one adapter into the base weights, got {len(checked)}; "
                              f"compare several adapters with fuse=false")
    if len({a.name for a in checked} | {BASE_LABEL}) != len(checked) + 1:
        raise GenerationError(f"generate.adapters: names must be distinct and not '{BASE_LABEL}'; set `name`")
    taken = sorted({a.name for a in checked} & set(g.baselines))
    if taken:
        raise GenerationError(f"generate.adapters: '{taken[0]}' is the label of a baseline (generate.baselines); "
                              f"set another `name`")
    return checked


def _label(text: str) -> str:
    return safe_name(text, fallback="adapter")


def _variants(g: GenerateConfig, adapters: list[AdapterFile]) -> list[Variant]:
    base = _label(Path(g.transformer).name) if g.transformer else BASE_LABEL
    out = ([Variant(base)] if g.include_base else []) + [Variant(a.name, a) for a in adapters]
    if not out:
        raise GenerationError("nothing to generate: generate.include_base=false and no generate.adapters")
    if g.include_base and base in g.baselines:
        raise GenerationError(f"generate.transformer={g.transformer}: its folder name '{base}' is the label of a "
                              f"baseline (generate.baselines); rename the folder or drop that baseline")
    return out


def _settings(g: GenerateConfig, spec, inputs: InputSet, pipe, device: torch.device, multiview: bool = False) -> Settings:
    family = family_of(spec)
    neg = g.negative_prompt if g.negative_prompt is not None else family.default_negative_prompt(pipe)
    height, width = g.height or inputs.height or spec.height, g.width or inputs.width or spec.width
    frames = g.num_frames or inputs.num_frames or spec.num_frames
    if height % 16 or width % 16 or (frames - 1) % 4:
        raise GenerationError(f"{inputs.source}: size {height}x{width}x{frames} frames does not fit the model "
                              f"(height and width multiples of 16, frames 4k+1); set generate.height/width/num_frames")
    ours = g.sampler == "worldtune" and family.own_sampler  # else the family's pipeline as is
    if multiview:
        if g.mode != "image2world":
            raise GenerationError(f"{inputs.source}: the multi-view model generates image2world only (one first frame "
                                  f"per camera); set generate.mode = \"image2world\"")
        ours = True  # the multi-view loop (infer/multiview.py) has no pipeline counterpart
    cuda = device.type == "cuda"
    fps = float(g.fps or inputs.fps or spec.fps)  # the clips' own rate: real and generated play at one speed
    return Settings(mode=g.mode, height=height, width=width, num_frames=frames, fps=fps,
                    steps=g.steps, guidance=g.guidance, negative_prompt=neg, cond_latent_frames=g.cond_latent_frames,
                    cond_timestep=g.cond_timestep, resize=g.resize, max_sequence_length=g.max_sequence_length or spec.max_sequence_length,
                    sampler="multiview" if multiview else "worldtune" if ours else "pipeline",
                    batch_guidance=multiview or ours and g.batch_guidance,
                    dtype=str(pipe.transformer.dtype).split(".")[-1], device=str(device),
                    compile=cuda if g.compile is None else g.compile and cuda, fused_adaln=ours and g.fused_adaln,
                    fp8=g.fp8, cache=_cache_label(g, pipe, ours, multiview, family.own_sampler))


def _speed_up(transformer: torch.nn.Module, g: GenerateConfig, s: Settings, dynamic: bool | None) -> None:
    """The trainer's speed switches (models/speed.py), after the adapters are loaded (so the layers they wrap stay
    out of `generate.fp8`); `dynamic` is the family's `compile_dynamic`."""
    from worldtune.models.speed import apply_speed

    if g.compile and not s.compile:
        print("note: generate.compile needs CUDA; running eager")
    if s.fp8:
        _fp8(transformer, "generate.fp8")
    try:
        apply_speed(transformer, fused_adaln=s.fused_adaln, compile=s.compile, attention=g.attention_backend,
                    dynamic=dynamic)
    except ConfigError as e:
        raise GenerationError(f"generate.attention_backend: {e}") from None


def _fp8(transformer: torch.nn.Module, option: str) -> None:
    """The blocks' linears in float8 through torchao (models/float8.py), refused with one line where torchao or the
    GPU cannot."""
    from worldtune.models.float8 import quantize_blocks

    try:
        n = quantize_blocks(transformer, next(transformer.parameters()).device, option)
    except ConfigError as e:
        raise GenerationError(str(e)) from None
    plain(f"{option}: {n} linear layers run float8 matmuls through torchao (frames differ from bf16's)")


def _cache_label(g: GenerateConfig, pipe, ours: bool, multiview: bool, own_sampler: bool) -> str | None:
    """The step cache's label, refused with one line where the sampler would not give the cache its steps: the
    multi-view loop, and a pipeline call whose transformer diffusers offers no caches (no `cache_context`)."""
    label = g.cache.label
    if label is None:
        return None
    if multiview:
        raise GenerationError("generate.cache: the multi-view model runs no step cache; set generate.cache.kind = "
                              "\"none\"")
    if not ours and not hasattr(pipe.transformer, "cache_context"):
        fix = ("set generate.sampler = \"worldtune\" (or generate.cache.kind = \"none\")" if own_sampler
               else "set generate.cache.kind = \"none\" (this model family has only its pipeline)")
        raise GenerationError(f"generate.cache: {type(pipe).__name__} runs no step cache; {fix}")
    return label


def _step_cache(transformer: torch.nn.Module, g: GenerateConfig, s: Settings) -> None:
    """diffusers' step cache on the blocks (models/step_cache.py), after the speed switches have set their class."""
    from worldtune.models.step_cache import apply_step_cache

    if s.cache is None:
        return
    try:
        apply_step_cache(transformer, g.cache, "generate.cache")
    except ConfigError as e:
        raise GenerationError(str(e)) from None
    plain(f"generate.cache: {s.cache} on the transformer's blocks (frames differ from the uncached model's)")


def _speed_up_vae(vae: torch.nn.Module, g: GenerateConfig, device: torch.device) -> None:
    """cuDNN's kernel search for the VAE's convolutions (generate.cudnn_benchmark) and a compiled VAE decoder
    (generate.compile_vae), on CUDA only: both compute the same convolutions, within floating-point tolerance."""
    if device.type != "cuda":
        if g.compile_vae:
            print("note: generate.compile_vae needs CUDA; decoding eagerly")
        return
    if g.cudnn_benchmark is not False:
        torch.backends.cudnn.benchmark = True
    if g.compile_vae:
        vae.decoder.compile()


# ------------------------------------------------------------------------------------------ plan
def _params_hash(variant: Variant, item: GenerationInput, seed: int, s: Settings, base_fp: str,
                 cfg: WorldtuneConfig) -> str:
    """What determines an output's content; a row with another hash is regenerated (speed options excluded)."""
    a = variant.adapter
    key = {
        "fingerprint": base_fp, "adapter": str(a.file) if a else None, "scale": a.scale if a else None,
        "fuse": cfg.generate.fuse, "prompt": item.prompt, "image": str(item.image), "video": str(item.video),
        "seed": seed, **{k: v for k, v in asdict(s).items() if k not in SPEED_SETTINGS},
    }
    if not s.fp8:
        del key["fp8"]  # off: outputs made before the option existed keep their hash
    if s.cache is None:
        del key["cache"]
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _plan(out: Path, g: GenerateConfig, variants: list[Variant], items: list[GenerationInput], s: Settings,
          base_fp: str, done: dict, cfg: WorldtuneConfig) -> tuple[list[Job], list[Job]]:
    """(pending, already complete) jobs, ordered variant -> input -> seed (one adapter switch per variant)."""
    pending, complete = [], []
    for v in variants:
        for item in items:
            for seed in item.seeds or tuple(g.seeds):
                job = Job(v, item, seed, _params_hash(v, item, seed, s, base_fp, cfg))
                ok = records.is_complete(out, done.get((v.label, item.name, seed)), job.params_hash)
                (complete if ok else pending).append(job)
    return pending, complete


def _baseline_hash(label: str, item: GenerationInput, s: Settings, vae_fp: str | None) -> str:
    """What determines a baseline's content: its source frames and the run's size, never the seed or the model's
    sampling settings (the round trip also the VAE's weights). Every seed's row of an input has this one hash."""
    key = {"baseline": label, "height": s.height, "width": s.width, "num_frames": s.num_frames, "fps": s.fps,
           "resize": s.resize}
    if label == "first_frame":
        key.update(image=str(item.image), video=str(item.video), views=item.views, mode=s.mode,
                   cond_pixel_frames=s.cond_pixel_frames if s.mode == "video2world" else 1)
    else:
        key.update(ground_truth=str(item.ground_truth), views=item.views, vae=vae_fp)
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _plan_baselines(out: Path, g: GenerateConfig, items: list[GenerationInput], s: Settings, vae_fp: str | None,
                    done: dict) -> tuple[list[Job], list[Job], Counter]:
    """(pending, already complete) baseline jobs, one per (baseline, input, seed), and the inputs that get no
    baseline of a kind, counted by (baseline, reason)."""
    pending, complete, absent = [], [], Counter()
    for label in g.baselines:
        v = Variant(label, baseline=True)
        for item in items:
            why = baselines.missing(label, item, s.mode)
            if why:
                absent[(label, why)] += 1
                continue
            h = _baseline_hash(label, item, s, vae_fp)
            for seed in item.seeds or tuple(g.seeds):
                ok = records.is_complete(out, done.get((label, item.name, seed)), h)
                (complete if ok else pending).append(Job(v, item, seed, h))
    return pending, complete, absent


# ------------------------------------------------------------------------------------ generation
@torch.no_grad()
def generate_video(pipe, family, s: Settings, frames: np.ndarray | None, prompt: str,
                   prompt_embeds: torch.Tensor | None, negative_embeds: torch.Tensor | None, seed: int) -> np.ndarray:
    """One video [T,H,W,3] (float in [0,1], or uint8) for conditioning frames, a prompt (text and embeddings) and a seed."""
    return family.decode_latents(pipe, sample_video(pipe, family, s, frames, prompt, prompt_embeds, negative_embeds,
                                                    seed))


@torch.no_grad()
def sample_video(pipe, family, s: Settings, frames: np.ndarray | None, prompt: str,
                 prompt_embeds: torch.Tensor | None, negative_embeds: torch.Tensor | None, seed: int) -> Any:
    """`generate_video` up to its decode (`family.generate_latents`): what `family.decode_latents` turns into frames."""
    noise = initial_noise(seed, family.latent_shape(pipe, s.num_frames, s.height, s.width))
    return family.generate_latents(pipe, s, frames, prompt, prompt_embeds, negative_embeds, noise, seed)


def _generate_all(pipe, spec, jobs: list[Job], s: Settings, embeds: PromptEmbeddings, out: Path, rank: int,
                  layout: dict | None, base_fp: str, cfg: WorldtuneConfig, stats: dict[str, Counter],
                  adapters_loaded: bool, stage: str = "generate") -> None:
    """Every pending job in order. With generate.overlap_decode on CUDA, a video decodes (infer/decode_queue.py) while
    the next one samples, and is written once the next one has sampled: the same files and rows, in the same order."""
    from worldtune.models.frames import decode_view

    device = pipe.transformer.device
    family = family_of(spec)
    queue = DecodeQueue(device, cfg.generate.overlap_decode)
    vae = decode_view(pipe.vae) if queue.background else None
    neg = embeds.get(s.negative_prompt, device) if s.guidance > 1 else None
    bad: dict[str, str] = {}  # input name -> why it was skipped (counted once per model variant)
    current: Variant | None = None
    mv = None  # the multi-view wrapper of the current variant (separate-views inputs)
    roles = separate_roles(layout)
    cached: tuple[str, Any] | None = None
    pending: tuple[Job, Future, float] | None = None  # a video decoding while the next one samples

    def finish(job: Job, video: np.ndarray, views: dict[str, np.ndarray], t0: float) -> None:
        elapsed = time.perf_counter() - t0
        row = _write_outputs(out, job, video, views, s, layout, base_fp, cfg, elapsed)
        records.append_row(out, rank, row)
        stats[job.variant.label]["generated"] += 1
        stats[job.variant.label]["seconds"] += elapsed
        bar.advance()

    def finish_pending() -> None:
        nonlocal pending
        if pending is not None:
            job, frames, t0 = pending
            pending = None
            video = frames.result()
            finish(job, video, split_views(video, layout), t0)

    with Progress(stage, len(jobs), "videos") as bar:
        try:
            for job in jobs:
                if job.variant != current:
                    _switch(pipe.transformer, job.variant, adapters_loaded, cfg.generate.fuse)
                    current = job.variant
                    if roles:
                        mv = view_model(pipe.transformer, roles, job.variant.adapter.path if job.variant.adapter else None)
                bar.info(f"{job.variant.label}: {job.item.name} s{job.seed}")
                if job.item.name in bad:
                    stats[job.variant.label]["skipped"] += 1
                    bar.advance()
                    continue
                try:
                    if cached is None or cached[0] != job.item.name:
                        cond = load_view_conditions(job.item, s.height, s.width, s.resize) if roles else \
                            load_condition(job.item, s.mode, s.cond_pixel_frames, s.height, s.width, s.resize)
                        cached = (job.item.name, cond)
                except (DatasetError, GenerationError) as e:
                    bad[job.item.name] = str(e)
                    bar.note(f"skip {job.item.name}: {e}")
                    stats[job.variant.label]["skipped"] += 1
                    bar.advance()
                    continue
                t0 = time.perf_counter()
                pos = embeds.get(job.item.prompt, device)
                if roles:
                    views = {r: to_uint8(v) for r, v in denoise_views(
                        pipe, mv, cached[1], pos, neg, job.seed, s.steps, s.guidance, s.num_frames, s.height, s.width,
                        s.cond_timestep).items()}
                    finish_pending()
                    finish(job, mosaic(views), views, t0)
                    continue
                sampled = sample_video(pipe, family, s, cached[1], job.item.prompt, pos, neg, job.seed)
                frames = queue.submit(lambda x=sampled: to_uint8(family.decode_latents(pipe, x, vae)),
                                      (sampled,) if isinstance(sampled, torch.Tensor) else ())
                finish_pending()  # the previous video decoded while this one sampled
                pending = (job, frames, t0)
            finish_pending()
        finally:
            queue.close()


def _switch(transformer: torch.nn.Module, variant: Variant, adapters_loaded: bool, fuse: bool) -> None:
    activate(transformer, variant.adapter, adapters_loaded)
    if fuse and variant.adapter is not None:
        transformer.fuse_lora(adapter_names=[variant.adapter.name])


def _write_baselines(pipe, jobs: list[Job], s: Settings, out: Path, rank: int, layout: dict | None,
                     cfg: WorldtuneConfig, stats: dict[str, Counter], done: dict, vae_fp: str | None) -> None:
    """Each pending baseline once per input, into one file its rows of every seed share, then a row per seed.

    A file that a complete row of the same input (same hash) already names is reused, not made again."""
    roles = separate_roles(layout)
    groups: dict[tuple[str, str], list[Job]] = {}
    for job in jobs:
        groups.setdefault((job.variant.label, job.item.name), []).append(job)
    recorded: dict[tuple[str, str], list[dict]] = {}  # rows already on disk, by (baseline, input)
    for (m, n, _), r in done.items():
        if (m, n) in groups:
            recorded.setdefault((m, n), []).append(r)
    with Progress("baselines", len(groups), "inputs") as bar:
        for (label, name), group in groups.items():
            first = group[0]
            t0 = time.perf_counter()
            kept = next((r for r in recorded.get((label, name), []) if records.is_complete(out, r, first.params_hash)),
                        None)
            if kept is not None:
                rel, views, frames = kept["video"], kept["views"], int(kept["num_frames"])
            else:
                try:
                    made = baselines.make(label, first.item, s, pipe.vae, roles)
                except (DatasetError, GenerationError) as e:
                    bar.note(f"skip {label} {name}: {e}")
                    stats[label]["skipped"] += len(group)
                    bar.advance()
                    continue
                video, view_frames = (mosaic(made), made) if roles else (made, split_views(made, layout))
                rel, views = _write_files(out, label, name, video, view_frames, s.fps)
                frames = int(video.shape[0])
            elapsed = time.perf_counter() - t0
            gt, gt_views = _ground_truth(out, first.item, layout)
            for job in group:
                records.append_row(out, rank, _baseline_row(job, rel, views, gt, gt_views, frames, s, cfg, vae_fp,
                                                            elapsed))
                stats[label]["generated"] += 1
            stats[label]["seconds"] += elapsed
            bar.advance()


def _baseline_row(job: Job, rel: str, views: dict[str, str], gt: str | None, gt_views: dict[str, str], frames: int,
                  s: Settings, cfg: WorldtuneConfig, vae_fp: str | None, elapsed: float) -> dict[str, Any]:
    """A baseline's row: a model row's identity, files and size, `baseline` true, and none of the sampling settings
    (no model made it)."""
    label = job.variant.label
    return {
        "model": label, "name": job.item.name, "seed": job.seed, "baseline": True,
        "description": baselines.BASELINES[label], "prompt": job.item.prompt, "instruction": job.item.instruction,
        "video": rel, "views": views, "ground_truth": gt, "ground_truth_views": gt_views, "fps": s.fps,
        "num_frames": frames, "height": s.height, "width": s.width, "steps": None, "guidance": None,
        "negative_prompt": None, "mode": s.mode, "cond_latent_frames": s.cond_latent_frames if s.mode == "video2world" else None,
        "resize": s.resize, "input_image": str(job.item.image) if job.item.image else None,
        "input_video": str(job.item.video) if job.item.video else None, "adapter": None, "adapter_scale": None,
        "fused": False, "transformer": None, "base_model": cfg.model.path or cfg.model.name,
        "vae_fingerprint": vae_fp if label == "vae_round_trip" else None, "device": s.device, "dtype": s.dtype,
        "elapsed_s": round(elapsed, 3), "params_hash": job.params_hash, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


# --------------------------------------------------------------------------------------- writing
def _write_files(out: Path, label: str, stem: str, video: np.ndarray, view_frames: dict[str, np.ndarray],
                 fps: float) -> tuple[str, dict[str, str]]:
    """Write `<label>/<stem>.mp4` and its camera views `<label>/<stem>/<role>.mp4` atomically; relative paths."""
    from worldtune.data.video import write_video

    rel = Path(label) / f"{stem}.mp4"
    views = {}
    for role, frames in view_frames.items():
        views[role] = str(Path(label) / stem / f"{role}.mp4")
        write_video(out / views[role], frames, fps)
    write_video(out / rel, video, fps)  # last: the main file existing means the views do too
    return str(rel), views


def _write_outputs(out: Path, job: Job, video: np.ndarray, view_frames: dict[str, np.ndarray], s: Settings,
                   layout: dict | None, base_fp: str, cfg: WorldtuneConfig, elapsed: float) -> dict[str, Any]:
    """Write the video (+ views, + ground truth) and return its row; every file is written atomically.

    `video` is the packed frame (grid layouts), the one camera, or the views side by side (separate
    views); `view_frames` are the per-camera videos ({} for a single camera).
    """
    rel, views = _write_files(out, job.variant.label, f"{job.item.name}_s{job.seed}", video, view_frames, s.fps)
    gt, gt_views = _ground_truth(out, job.item, layout)
    a = job.variant.adapter
    return {
        "model": job.variant.label, "name": job.item.name, "seed": job.seed, "baseline": False, "prompt": job.item.prompt,
        "instruction": job.item.instruction, "video": rel, "views": views, "ground_truth": gt,
        "ground_truth_views": gt_views, "fps": s.fps, "num_frames": int(video.shape[0]), "height": s.height,
        "width": s.width, "steps": s.steps, "guidance": s.guidance, "negative_prompt": s.negative_prompt,
        "mode": s.mode, "cond_latent_frames": s.cond_latent_frames if s.mode == "video2world" else None,
        "cond_timestep": s.cond_timestep, "resize": s.resize,
        "input_image": str(job.item.image) if job.item.image else None,
        "input_video": str(job.item.video) if job.item.video else None,
        "adapter": str(a.path) if a else None, "adapter_scale": a.scale if a else None,
        "fused": bool(cfg.generate.fuse and a), "transformer": cfg.generate.transformer,
        "base_model": cfg.model.path or cfg.model.name, "base_fingerprint": base_fp,
        **{k: getattr(s, k) for k in SPEED_SETTINGS}, "dtype": s.dtype, "fp8": s.fp8, "cache": s.cache,
        "elapsed_s": round(elapsed, 3), "params_hash": job.params_hash,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def _ground_truth(out: Path, item: GenerationInput, layout: dict | None) -> tuple[str | None, dict[str, str]]:
    """Write the real clip and its camera views under ground_truth/ once; returns relative paths.

    A packed clip is copied and split by the layout; the per-camera clips of a separate-views input
    are copied and also put side by side (as the generated mosaic).
    """
    if item.ground_truth is None and not item.views:
        return None, {}
    from worldtune.data.video import probe, read_frames, write_video

    src_views = item.view_files
    roles = list(src_views) if src_views else layout_roles(layout)
    views = {role: str(Path("ground_truth") / item.name / f"{role}.mp4") for role in roles}
    suffix = item.ground_truth.suffix if item.ground_truth else ".mp4"
    rel = Path("ground_truth") / f"{item.name}{suffix}"
    if src_views:
        for role, src in src_views.items():
            _copy_once(src, out / views[role])
        if not (out / rel).is_file():
            write_video(out / rel, mosaic({r: read_frames(f) for r, f in src_views.items()}), probe(src_views[roles[0]]).fps)
        return str(rel), views
    if not all((out / v).is_file() for v in views.values()):
        fps = probe(item.ground_truth).fps
        for role, tile in split_views(read_frames(item.ground_truth), layout).items():
            write_video(out / views[role], tile, fps)
    _copy_once(item.ground_truth, out / rel)
    return str(rel), views


def _copy_once(src: Path, dest: Path) -> None:
    if dest.is_file():
        return
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


# ---------------------------------------------------------------------------------------- printing
def _print_plan(inputs: InputSet, mine, variants, jobs, resumed, rank: int, world: int, s: Settings,
                baseline_labels: list[str], base_jobs, base_resumed) -> None:
    from rich.console import Console

    console = Console()
    console.print(
        f"[bold]generate[/] {len(inputs.items)} inputs from {inputs.source} ({inputs.kind}); process {rank}/{world} "
        f"has {len(mine)}; models: {', '.join(v.label for v in variants)}; {len(jobs)} videos to make, "
        f"{len(resumed)} already done; {s.mode} {s.height}x{s.width}x{s.num_frames} (HxWxF) @ {s.fps:g} fps, "
        f"{s.steps} steps, guidance {s.guidance:g}, {s.sampler} sampler, {s.dtype} on {s.device}"
        + (f", step cache {s.cache}" if s.cache else ""))
    if baseline_labels:
        console.print(f"baselines: {', '.join(baseline_labels)}; {len(base_jobs)} rows to write, "
                      f"{len(base_resumed)} already done")


def _print_summary(stats: dict[str, Counter], skipped_inputs: Counter, out: Path, absent: Counter) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"generations in {out}")
    for col in ("model", "generated", "resumed", "skipped", "s/video"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for label, c in stats.items():
        per = f"{c['seconds'] / c['generated']:.2f}" if c["generated"] else "-"
        table.add_row(label, str(c["generated"]), str(c["resumed"]), str(c["skipped"]), per)
    console = Console()
    console.print(table)
    for reason, n in skipped_inputs.items():
        console.print(f"skipped {n} input(s): {reason}")
    for (label, reason), n in absent.items():
        console.print(f"note: no {label} baseline for {n} input(s): {reason}")
