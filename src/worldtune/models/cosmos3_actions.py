"""Cosmos 3 forward dynamics: first frame + an action chunk -> the video the actions produce.

In `Cosmos3OmniPipeline`'s `forward_dynamics` mode the sequence is text, then the video latents (the
first latent frame clean, the rest noisy), then one token per action step (all clean: the actions are
conditioning, never predicted). The actions, zero-padded from the domain's raw width to the model's
`action_dim`, enter through `action_proj_in`, a `DomainAwareLinear` whose weight row is chosen by the
embodiment domain; the velocity comes back for the noisy video frames only. Training therefore builds the
same sequence with the pipeline's own segment builders (`_prepare_text_segment`,
`_prepare_vision_segment`, `_prepare_action_segment`), exactly as `models/cosmos3.py` does for video, and
worldtune's generic objective (`train/flow.py`, one clean leading latent frame) applies unchanged.

A robot post-trains its domain's projection rows beside the adapter: `train_domain_rows` makes just those
rows trainable (a parametrization that overwrites one row of the frozen table), so no optimizer setting,
weight decay included, can touch the 31 other embodiments' rows. What NVIDIA's recipe does, and where
worldtune follows it, is written down in docs/cosmos3.md.
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
from worldtune.models.cosmos3 import PAD_ID, _pipeline_view, sample_clean_first, transformer_inputs
from worldtune.models.cosmos3_domains import ActionDomain

MODE = "forward_dynamics"
ROWS_FILE = "action_domain.safetensors"  # the domain's trained projection rows, beside an adapter
SIDECAR = "worldtune_adapter.json"  # the adapter's info JSON (infer/adapters.py reads it too); key "action"
INPUT_TABLES = ("action_proj_in.fc", "action_proj_in.bias")  # actions in: all forward dynamics reads
OUTPUT_TABLES = ("action_proj_out.fc", "action_proj_out.bias")  # actions out: inverse dynamics and policy


def padded_actions(actions: torch.Tensor, action_dim: int) -> torch.Tensor:
    """[T, D] raw-width actions -> [T, action_dim] with zeros beyond D, as the pipeline pads them."""
    if actions.shape[-1] > action_dim:
        raise ConfigError(f"actions are {actions.shape[-1]}-D but the model's action tokens hold {action_dim}")
    return torch.nn.functional.pad(actions, (0, action_dim - actions.shape[-1]))


def forward_dynamics_inputs(config, input_ids: torch.Tensor, x_t: torch.Tensor, frame_sigma: torch.Tensor,
                            actions: torch.Tensor, domain_id: int, fps: float | None) -> dict[str, Any]:
    """Keyword arguments of `Cosmos3OmniTransformer.forward` for one forward-dynamics sample.

    `input_ids` [L] text tokens; `x_t` [1, C, T, H, W] latents, clean on the first frame; `frame_sigma` [T]
    noise level per latent frame; `actions` [K, D] the chunk (K transitions for 4*(T-1)+1 = K+1 video
    frames), already normalised, at the domain's raw width D."""
    from diffusers import Cosmos3OmniPipeline

    view, dev = _pipeline_view(config), x_t.device
    kw = transformer_inputs(config, input_ids, x_t, frame_sigma, num_cond=1, fps=fps)
    offset = Cosmos3OmniPipeline._prepare_text_segment(view, input_ids.tolist(), dev)["vision_start_temporal_offset"]
    tokens = padded_actions(actions.to(device=dev, dtype=x_t.dtype), config.action_dim)
    seg = Cosmos3OmniPipeline._prepare_action_segment(
        view, tokens, condition_frame_indexes=list(range(len(tokens))), mrope_offset=offset, action_fps=fps,
        curr=kw["sequence_length"], device=dev)
    kw.update(
        position_ids=torch.cat([kw["position_ids"], seg["action_mrope_ids"]], dim=1),
        sequence_length=kw["sequence_length"] + seg["action_len"], action_tokens=[tokens],
        action_token_shapes=seg["action_token_shapes"], action_sequence_indexes=seg["action_sequence_indexes"],
        action_mse_loss_indexes=seg["action_mse_loss_indexes"],
        action_timesteps=torch.zeros(seg["num_noisy_action_tokens"], device=dev),  # none: every action is clean
        action_noisy_frame_indexes=seg["action_noisy_frame_indexes"],
        action_domain_ids=[torch.tensor([domain_id], dtype=torch.long, device=dev)])
    return kw


def predict_forward_dynamics(model: nn.Module, batch, text: torch.Tensor, actions: torch.Tensor,
                             domain_ids: torch.Tensor, dtype: torch.dtype, fps: float | None) -> torch.Tensor:
    """Velocity [B, 48, T, H, W] for a noised FlowBatch whose first latent frame is clean; one transformer call
    per sample. `text` is the family's [B, 2, L] token ids (`batch.text_keep` picks the row), `actions`
    [B, K, D] normalised chunks, `domain_ids` [B]."""
    from worldtune.train.adapters import unwrap

    if bool((batch.num_cond != 1).any()):
        raise ConfigError("forward dynamics conditions on exactly the first latent frame: set "
                          "train.cond_frames_probs = {1 = 1.0}")
    config = unwrap(model).config
    preds = []
    for b in range(batch.x_t.shape[0]):
        ids = text[b, 0 if bool(batch.text_keep[b] > 0) else 1]
        kw = forward_dynamics_inputs(config, ids[ids != PAD_ID], batch.x_t[b:b + 1].to(dtype),
                                     batch.timestep[b, 0, :, 0, 0], actions[b], int(domain_ids[b]), fps)
        preds.append(model(**kw)[0][0])
    return torch.cat(preds)


def sample_forward_dynamics(transformer: nn.Module, scheduler, x0: torch.Tensor, text: torch.Tensor,
                            actions: torch.Tensor, domain_id: int, noise: torch.Tensor, steps: int, guidance: float,
                            fps: float | None = None) -> torch.Tensor:
    """The pipeline's forward-dynamics loop on cached inputs (the trainer's validation videos): every action step
    clean in both guidance branches; `actions` [1, K, D] normalised (loop: `cosmos3.sample_clean_first`)."""
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

    Forward dynamics reads actions only through the input projection: the output projection decodes predicted
    actions (inverse dynamics, policy) and gets no gradient here. `init_from` starts a new domain's rows from
    another domain's trained ones instead of the checkpoint's values in that slot."""
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
    """The forward-dynamics facts an adapter was trained with (from its info JSON, key "action"): `domain`
    (ActionDomain.to_dict()), `normalization` and `stats` (for `worldtune.data.actions.normalize`), `names`,
    `width`, `chunk_size`, `fps`, `tier`, `canvas`, `view_point`, `rows_file`."""
    folder = Path(adapter_dir)
    folder = folder.parent if folder.is_file() else folder
    path = folder / SIDECAR
    try:
        info = json.loads(path.read_text(encoding="utf-8")).get("action")
    except FileNotFoundError:
        raise GenerationError(f"{folder} has no {SIDECAR}: point at the folder `worldtune train` or `worldtune "
                              "export` wrote for a forward-dynamics run") from None
    except (OSError, ValueError, AttributeError) as e:
        raise GenerationError(f"{path} cannot be read ({type(e).__name__}): re-export the adapter") from None
    if not isinstance(info, dict) or not isinstance(info.get("domain"), dict):
        raise GenerationError(f"{path} records no action domain: the adapter was not trained with "
                              "train.task = \"forward_dynamics\"")
    return info


def load_action_adapter_rows(transformer: nn.Module, adapter_dir: str | Path) -> ActionDomain:
    """Write an adapter's trained domain rows into the transformer's action input projection (in place, at the
    domain's slot) and register the domain with the pipeline; returns the domain. Load the LoRA itself with
    `transformer.load_lora_adapter` as for any adapter."""
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
    for name, table in _tables(transformer, INPUT_TABLES).items():
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


# ------------------------------------------------------------------------------ the family's interface
class ForwardDynamics:
    """What `train.task = "forward_dynamics"` asks of the Cosmos 3 family: the canvas, the action caption, the
    canvas latents, the trainable domain rows, the prediction and the sampler (ModelFamily.dynamics())."""

    def __init__(self, family) -> None:
        self.family = family

    def canvas(self, height: int, width: int, tier: int) -> tuple[int, int]:
        return action_canvas(height, width, tier)

    def prompt_ids(self, pipe, tasks: list[str], chunk: int, canvas: tuple[int, int], fps: float,
                   view_point: str, max_length: int) -> torch.Tensor:
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

    def encode_clip(self, pipe, frames: np.ndarray, tier: int) -> torch.Tensor:
        return encode_clip_on_canvas(pipe, frames, tier)

    def check_heads(self, transformer: nn.Module) -> None:
        _tables(transformer, INPUT_TABLES)

    def train_rows(self, transformer: nn.Module, domain_id: int, init_from: int | None) -> list[nn.Parameter]:
        return train_domain_rows(transformer, domain_id, init_from)

    predict = staticmethod(predict_forward_dynamics)
    sample = staticmethod(sample_forward_dynamics)
    save_rows = staticmethod(save_action_adapter_rows)
    merge_rows = staticmethod(merge_domain_rows)
