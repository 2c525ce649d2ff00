"""Cosmos 3 action runs: forward dynamics (first frame + an action chunk -> video), inverse dynamics (video ->
the chunk) and policy (first frame -> video + chunk), as training predictions on cached inputs.

In `Cosmos3OmniPipeline`'s action modes the sequence is text, then the video latents, then one token per action
step. Which of them are clean is all that differs between the modes (`worldtune.train.action_flow.MODES`):
forward dynamics keeps the first latent frame and every action clean and predicts the video's velocity;
inverse dynamics keeps every latent frame clean and predicts the actions' velocity; policy keeps the first
frame and predicts both. The actions, zero-padded from the domain's raw width to the model's `action_dim`,
enter through `action_proj_in` and (where denoised) come back through `action_proj_out`, both
`DomainAwareLinear`s whose weight row is chosen by the embodiment domain. Training builds the sequence with the
pipeline's own segment builders (`_prepare_text_segment`, `_prepare_vision_segment`, `_prepare_action_segment`),
exactly as `models/cosmos3.py` does for video; the objective is `train/flow.py` for the video and
`train/action_flow.py` for the chunk.

A robot post-trains its domain's projection rows beside the adapter: `train_domain_rows` makes just those rows
trainable (a parametrization that overwrites one row of the frozen table), the input projection's always and the
output projection's when the task predicts actions, so no optimizer setting, weight decay included, can touch
the 31 other embodiments' rows. What NVIDIA's recipes do, and where worldtune follows them, is written down in
docs/cosmos3.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parametrize

from worldtune.errors import ConfigError, DatasetError, GenerationError
from worldtune.models.action_dynamics import ActionDomain
from worldtune.models.cosmos3_domains import INPUT_TABLES, OUTPUT_TABLES, ROWS_FILE
from worldtune.models.cosmos3_pipeline import (NUM_TRAIN_TIMESTEPS, PAD_ID, pipeline_view, sample_clean_first,
                                              transformer_inputs)

MODE = "forward_dynamics"  # the mode whose caption the cache stores (the pipeline writes the same for every mode)
SIDECAR = "worldtune_adapter.json"  # the adapter's info JSON (infer/adapters.py reads it too); key "action"


def padded_actions(actions: torch.Tensor, action_dim: int) -> torch.Tensor:
    """[T, D] raw-width actions -> [T, action_dim] with zeros beyond D, as the pipeline pads them."""
    if actions.shape[-1] > action_dim:
        raise ConfigError(f"actions are {actions.shape[-1]}-D but the model's action tokens hold {action_dim}")
    return torch.nn.functional.pad(actions, (0, action_dim - actions.shape[-1]))


def action_run_inputs(config, input_ids: torch.Tensor, x_t: torch.Tensor, frame_sigma: torch.Tensor,
                      actions: torch.Tensor, domain_id: int, fps: float | None, clean_frames: int = 1,
                      action_sigma: torch.Tensor | None = None) -> dict[str, Any]:
    """Keyword arguments of `Cosmos3OmniTransformer.forward` for one sample of an action run.

    `input_ids` [L] text tokens; `x_t` [1, C, T, H, W] latents, clean on the first `clean_frames` (1, or T for
    inverse dynamics); `frame_sigma` [T] noise level per latent frame; `actions` [K, D] the chunk (K transitions
    for 4*(T-1)+1 = K+1 video frames) at the domain's raw width D, normalised, and noised where denoised;
    `action_sigma` its noise level when the chunk is denoised (each step a noisy token at timestep sigma x 1000,
    as the pipeline's loop feeds it), None when every step is a clean conditioning token."""
    from diffusers import Cosmos3OmniPipeline

    view, dev = pipeline_view(config), x_t.device
    kw = transformer_inputs(config, input_ids, x_t, frame_sigma, num_cond=clean_frames, fps=fps)
    offset = Cosmos3OmniPipeline._prepare_text_segment(view, input_ids.tolist(), dev)["vision_start_temporal_offset"]
    tokens = padded_actions(actions.to(device=dev, dtype=x_t.dtype), config.action_dim)
    seg = Cosmos3OmniPipeline._prepare_action_segment(
        view, tokens, condition_frame_indexes=list(range(len(tokens))) if action_sigma is None else [],
        mrope_offset=offset, action_fps=fps, curr=kw["sequence_length"], device=dev)
    n_noisy = seg["num_noisy_action_tokens"]
    timesteps = (torch.zeros(0, device=dev) if action_sigma is None else
                 (action_sigma.to(dev, torch.float32) * NUM_TRAIN_TIMESTEPS).reshape(1).expand(n_noisy))
    kw.update(
        position_ids=torch.cat([kw["position_ids"], seg["action_mrope_ids"]], dim=1),
        sequence_length=kw["sequence_length"] + seg["action_len"], action_tokens=[tokens],
        action_token_shapes=seg["action_token_shapes"], action_sequence_indexes=seg["action_sequence_indexes"],
        action_mse_loss_indexes=seg["action_mse_loss_indexes"], action_timesteps=timesteps,
        action_noisy_frame_indexes=seg["action_noisy_frame_indexes"],
        action_domain_ids=[torch.tensor([domain_id], dtype=torch.long, device=dev)])
    return kw


def forward_dynamics_inputs(config, input_ids: torch.Tensor, x_t: torch.Tensor, frame_sigma: torch.Tensor,
                            actions: torch.Tensor, domain_id: int, fps: float | None) -> dict[str, Any]:
    """`action_run_inputs` of a forward-dynamics sample: the first latent frame and every action step clean."""
    return action_run_inputs(config, input_ids, x_t, frame_sigma, actions, domain_id, fps)


def predict_dynamics(model: nn.Module, batch, text: torch.Tensor, actions, domain_ids: torch.Tensor,
                     dtype: torch.dtype, fps: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(video velocity [B, 48, T, H, W], action velocity [B, K, D]) for a noised FlowBatch and ActionBatch
    (`worldtune.train.action_flow`), each sample in its mode: the video clean on its first frame (forward
    dynamics, policy) or on all of them (inverse dynamics), the chunk clean or denoised; samples whose packed
    sequences have one shape share a transformer call (models/cosmos3_batch.py).
    `text` is the family's [B, 2, L] token ids (`batch.text_keep` picks the row), `domain_ids` [B]. Velocities are
    zero where tokens are clean; the action velocity is cropped to the domain's raw width D."""
    from worldtune.models.cosmos3_batch import call_grouped
    from worldtune.train.action_flow import clean_frames
    from worldtune.train.adapters import unwrap

    config = unwrap(model).config
    frames, width = batch.x_t.shape[2], actions.x_t.shape[-1]
    kws = []
    for b, mode in enumerate(actions.modes):
        if int(batch.num_cond[b]) != clean_frames(mode, frames):
            raise ConfigError(f"a {mode} sample keeps {clean_frames(mode, frames)} latent frame(s) clean, not "
                              f"{int(batch.num_cond[b])}: set train.cond_frames_probs = {{1 = 1.0}} (or unset it)")
        ids = text[b, 0 if bool(batch.text_keep[b] > 0) else 1]
        kw = action_run_inputs(config, ids[ids != PAD_ID], batch.x_t[b:b + 1].to(dtype), batch.timestep[b, 0, :, 0, 0],
                               actions.x_t[b], int(domain_ids[b]), fps, clean_frames=int(batch.num_cond[b]),
                               action_sigma=actions.sigma[b] if bool(actions.noisy[b] > 0) else None)
        kws.append(kw)
    outs = call_grouped(model, kws)  # samples of one sequence shape share a call
    return torch.cat([v for v, _, _ in outs]), torch.stack([a[:, :width] for _, _, a in outs])


def predict_forward_dynamics(model: nn.Module, batch, text: torch.Tensor, actions: torch.Tensor,
                             domain_ids: torch.Tensor, dtype: torch.dtype, fps: float | None) -> torch.Tensor:
    """Video velocity [B, 48, T, H, W] of forward-dynamics samples (`actions` [B, K, D] clean, normalised chunks):
    `predict_dynamics` with every sample in that mode."""
    from worldtune.train.action_flow import prepare_actions

    n = batch.x_t.shape[0]
    chunk = prepare_actions(actions, [0] * n, batch.sigma, ["forward_dynamics"] * n)
    return predict_dynamics(model, batch, text, chunk, domain_ids, dtype, fps)[0]


def sample_forward_dynamics(transformer: nn.Module, scheduler, x0: torch.Tensor, text: torch.Tensor,
                            actions: torch.Tensor, domain_id: int, noise: torch.Tensor, steps: int, guidance: float,
                            fps: float | None = None) -> torch.Tensor:
    """The pipeline's forward-dynamics loop on cached inputs (the trainer's validation videos): every action step
    clean in both guidance branches; `actions` [1, K, D] normalised (loop: `cosmos3_pipeline.sample_clean_first`)."""
    return sample_clean_first(transformer, scheduler, x0, text, noise, steps, guidance,
                              lambda config, ids, x, sigma: forward_dynamics_inputs(config, ids, x, sigma, actions[0],
                                                                                    domain_id, fps))


# ------------------------------------------------------------------------------ prompts and canvas
def action_canvas(height: int, width: int, tier: int) -> tuple[int, int]:
    """The padded canvas the pipeline conditions an action run on (and names in its caption) for frames of
    this size at a resolution tier (256, 480, 704, 720): the tier's bin of the closest aspect ratio."""
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import _ACTION_RESOLUTION_BINS
    from diffusers.video_processor import VideoProcessor

    return VideoProcessor.classify_height_width_bin(height, width, ratios=_ACTION_RESOLUTION_BINS[str(tier)])


def action_prompt_token_ids(pipe, task: str, chunk_size: int, height: int, width: int, fps: float,
                            view_point: str = "ego_view") -> tuple[list[int], list[int]]:
    """(prompt ids, dropped-text ids) as the pipeline tokenizes an action run: the task inside its structured
    JSON caption (view point, duration, fps, the canvas `height` x `width`); the dropped text is the empty
    caption, which is also what the pipeline's guidance branch reads."""
    return pipe.tokenize_prompt(task, None, num_frames=chunk_size + 1, height=height, width=width, fps=fps,
                                action_mode=MODE, action_view_point=view_point)


@torch.no_grad()
def encode_clip_on_canvas(pipe, frames: np.ndarray, tier: int) -> torch.Tensor:
    """Normalised latents [48, T', h, w] of a clip (uint8 [T, H, W, 3]) encoded as the pipeline conditions a
    forward-dynamics run: downscaled (never upscaled) and padded bottom/right into the tier's canvas, VAE-encoded,
    the latents cropped back to the content. The pipeline's own functions do each step."""
    from PIL import Image

    clip = [Image.fromarray(f) for f in frames]  # what the pipeline is given (PIL frames map 0..255 to -1..1)
    device = next(pipe.vae.parameters()).device
    video, size, _, _ = pipe._prepare_action_video_conditioning(clip, tier, len(clip), device=device,
                                                                dtype=torch.float32)
    latents = pipe._encode_video(video).float()
    return pipe._remove_action_video_padding_from_latent(latents, size)[0]


def register_domain(domain: ActionDomain) -> None:
    """Make a new domain known to diffusers' pipeline in this process (its name -> slot and width tables), so
    `CosmosActionCondition(domain_name=...)` accepts it; an existing domain needs nothing."""
    from diffusers.pipelines.cosmos import pipeline_cosmos3_omni as p

    if domain.new:
        p._EMBODIMENT_TO_DOMAIN_ID[domain.name] = domain.id
        p._EMBODIMENT_TO_RAW_ACTION_DIM[domain.name] = domain.width


# ------------------------------------------------------------------------------ domain rows
class _DomainRow(nn.Module):
    """Parametrization of a per-domain table: the frozen table with one row replaced by a trainable copy."""

    def __init__(self, table: torch.Tensor, domain_id: int, init_from: int) -> None:
        super().__init__()
        self.row = nn.Parameter(table[init_from:init_from + 1].detach().clone().float())
        self.register_buffer("index", torch.tensor([domain_id], device=table.device), persistent=False)

    def forward(self, table: torch.Tensor) -> torch.Tensor:
        return table.index_copy(0, self.index, self.row.to(table.dtype))


def _tables(transformer: nn.Module, names: tuple[str, ...] = INPUT_TABLES + OUTPUT_TABLES) -> dict[str, nn.Embedding]:
    if not getattr(transformer, "action_gen", False):
        raise ConfigError("this Cosmos 3 transformer was built without action heads (action_gen = false): "
                          "action-conditioned training needs a checkpoint with them")
    return {name: transformer.get_submodule(name) for name in names}


def train_domain_rows(transformer: nn.Module, domain_id: int, init_from: int | None = None,
                      outputs: bool = False) -> list[nn.Parameter]:
    """Make one domain's rows of the action input projection trainable (weight and bias; with `outputs` also
    the output projection's) and return them; every other row stays frozen whatever the optimizer does.

    Every action task reads actions in through the input projection; only tasks that denoise actions (inverse
    dynamics, policy, joint) read them out through the output projection, so forward dynamics leaves it alone.
    `init_from` starts a new domain's rows from another domain's trained ones instead of the checkpoint's values
    in that slot."""
    params = []
    for table in _tables(transformer, INPUT_TABLES + (OUTPUT_TABLES if outputs else ())).values():
        if parametrize.is_parametrized(table, "weight"):
            raise ConfigError("the action projections already train a domain's rows: one domain per run")
        n = table.weight.shape[0]
        if not (0 <= domain_id < n and 0 <= (init_from if init_from is not None else domain_id) < n):
            raise ConfigError(f"domain slot {domain_id} (from {init_from}) is outside the model's {n} slots")
        table.weight.requires_grad_(False)
        parametrize.register_parametrization(table, "weight", _DomainRow(table.weight, domain_id,
                                                                        domain_id if init_from is None else init_from))
        params.append(table.parametrizations.weight[0].row)
    return params


def train_tables(transformer: nn.Module, outputs: bool = False) -> list[nn.Parameter]:
    """The action tables whole and the action tokens' modality embedding (a model trained from its start: every
    slot is the model's to learn; only the slots of the data's domains receive gradients). The embedding, added to
    every action token, is zero in a fresh model and outside the generator pathway a full fine-tune trains."""
    tables = [t.weight.requires_grad_(True)
              for t in _tables(transformer, INPUT_TABLES + (OUTPUT_TABLES if outputs else ())).values()]
    return tables + [transformer.action_modality_embed.requires_grad_(True)]


def domain_rows_state(transformer: nn.Module) -> dict[str, torch.Tensor]:
    """The trained rows by table name (`action_proj_in.fc.weight`, ...), each [1, width]: what an adapter saves."""
    return {f"{name}.weight": t.parametrizations.weight[0].row.detach()
            for name, t in _tables(transformer).items() if parametrize.is_parametrized(t, "weight")}


def merge_domain_rows(transformer: nn.Module) -> None:
    """Write the trained rows into the tables and drop the parametrization: a plain diffusers transformer again."""
    for table in _tables(transformer).values():
        if parametrize.is_parametrized(table, "weight"):
            parametrize.remove_parametrizations(table, "weight", leave_parametrized=True)


# ------------------------------------------------------------------------------ adapters with domain rows
def save_action_adapter_rows(out: str | Path, transformer: nn.Module) -> Path:
    """`action_domain.safetensors` in an adapter folder: the trained rows, keys as `domain_rows_state`."""
    from safetensors.torch import save

    from worldtune.atomic import atomic_write_bytes
    from worldtune.train.adapters import unwrap

    rows = {k: v.float().cpu().contiguous() for k, v in domain_rows_state(unwrap(transformer)).items()}
    if not rows:
        raise ConfigError("no action-projection rows are being trained: nothing to save beside the adapter")
    path = Path(out) / ROWS_FILE
    atomic_write_bytes(path, save(rows, metadata={"format": "worldtune.action_domain", "version": "1"}))
    return path


def read_action_info(adapter_dir: str | Path) -> dict[str, Any]:
    """The facts an action adapter was trained with (from its info JSON, key "action"): `task`
    (forward_dynamics, inverse_dynamics or joint), `domain` (ActionDomain.to_dict()), `normalization` and `stats`
    (for `worldtune.data.actions.normalize`), `names`, `width`, `chunk_size`, `fps`, `tier`, `canvas`,
    `view_point`, `rows_file`."""
    folder = Path(adapter_dir)
    folder = folder.parent if folder.is_file() else folder
    path = folder / SIDECAR
    try:
        info = json.loads(path.read_text(encoding="utf-8")).get("action")
    except FileNotFoundError:
        raise GenerationError(f"{folder} has no {SIDECAR}: point at the folder `worldtune train` or `worldtune "
                              "export` wrote for an action run (train.task = forward_dynamics, inverse_dynamics or "
                              "joint)") from None
    except (OSError, ValueError, AttributeError) as e:
        raise GenerationError(f"{path} cannot be read ({type(e).__name__}): re-export the adapter") from None
    if not isinstance(info, dict) or not isinstance(info.get("domain"), dict):
        raise GenerationError(f"{path} records no action domain: the adapter was not trained with an action task "
                              "(train.task = forward_dynamics, inverse_dynamics or joint)")
    return info


def require_mode(info: dict[str, Any], mode: str, adapter: str | Path) -> None:
    """A one-line error unless the adapter's task trained `mode` (e.g. serving forward dynamics with an adapter
    that only learned inverse dynamics: its LoRA never saw a noisy video)."""
    from worldtune.train.action_flow import task_modes

    task = info.get("task") or "forward_dynamics"
    if mode not in task_modes(task):
        raise ConfigError(f"adapter {adapter} was trained with train.task = \"{task}\", which does not train "
                          f"{mode}: use an adapter trained with train.task = \"{mode}\" or \"joint\"")


def load_action_adapter_rows(transformer: nn.Module, adapter_dir: str | Path) -> ActionDomain:
    """Write an adapter's trained domain rows into the transformer's action projections (in place, at the domain's
    slot: the input projection's always, the output projection's when the adapter trained them) and register the
    domain with the pipeline; returns the domain. Load the LoRA itself with `transformer.load_lora_adapter` as for
    any adapter."""
    from safetensors.torch import load_file

    info = read_action_info(adapter_dir)
    folder = Path(adapter_dir)
    folder = folder.parent if folder.is_file() else folder
    domain = ActionDomain(**info["domain"])
    path = folder / info.get("rows_file", ROWS_FILE)
    try:
        rows = load_file(str(path))
    except FileNotFoundError:
        raise GenerationError(f"{path} is missing: re-export the adapter (it holds the domain's trained rows)") from None
    except Exception as e:  # safetensors' own error type for a damaged file
        raise GenerationError(f"{path} cannot be read ({str(e).splitlines()[0][:80]}): re-export the adapter") from None
    outputs = [n for n in OUTPUT_TABLES if f"{n}.weight" in rows]
    for name, table in _tables(transformer, INPUT_TABLES + tuple(outputs)).items():
        row = rows.get(f"{name}.weight")
        if parametrize.is_parametrized(table, "weight"):
            raise GenerationError(f"{name} is training a domain's rows: load adapters into a plain transformer")
        n, width = table.weight.shape
        if row is None or tuple(row.shape) != (1, width) or not 0 <= domain.id < n:
            raise GenerationError(f"{path}: row '{name}.weight' {list(row.shape) if row is not None else 'missing'} "
                                  f"at slot {domain.id} does not fit this model's [{n}, {width}] table: use an "
                                  "adapter trained on this base model")
        with torch.no_grad():
            table.weight[domain.id] = row[0].to(device=table.weight.device, dtype=table.weight.dtype)
    register_domain(domain)
    return domain


def action_prompt_ids(pipe, tasks: list[str], chunk: int, canvas: tuple[int, int], fps: float, view_point: str,
                      max_length: int) -> torch.Tensor:
    """Token ids [N, 2, L] (padded with -1): row 0 the task's action caption, row 1 the dropped text."""
    rows = [action_prompt_token_ids(pipe, t, chunk, *canvas, fps, view_point) for t in tasks]
    length = max_length
    out = torch.full((len(tasks), 2, length), PAD_ID, dtype=torch.long)
    for i, (task, pair) in enumerate(zip(tasks, rows)):
        for j, ids in enumerate(pair):
            if len(ids) > length:
                raise DatasetError(f"task {task[:60]!r}... is {len(ids)} tokens in its action caption, over the "
                                   f"model's {length}: shorten the task text")
            out[i, j, :len(ids)] = torch.tensor(ids)
    return out
