"""The multi-view model: one single-view Cosmos DiT sees V camera streams as one sequence.

Design (docs/multiview.md):

- **Stacking.** The latents of V views, each [C, T, H, W], are concatenated along time into
  [C, V·T, H, W] (view-major: all frames of view 0, then view 1, ...). Everything per frame
  (timestep, condition mask, loss mask) is stacked the same way.
- **Positions repeated per view.** Each view's tokens get exactly the rotary (and, if the model
  has one, learnable) positions the single-view model gives a T-frame clip: frame indices restart
  at 0 for every view. A view is therefore, to every pretrained weight, an ordinary video.
- **View embedding.** A learned [V, hidden] table, initialised to zero, added to every token of a
  view right after patch embedding. At zero the model starts exactly as the single-view model.
- **Attention.** "joint" (default): full self-attention over the tokens of all views, which is
  what lets views agree with each other. "per_view": each view attends only to itself, done by
  folding views into the batch for the blocks (exactly block-diagonal attention, with no mask
  and no wasted FLOPs). Cross-attention to the text and the MLP are per token in both modes.

Every weight is the wrapped `CosmosTransformer3DModel`'s own: the forward below re-runs its
loop around its submodules (patch_embed, rope, learnable_pos_embed, time_embed, crossattn_proj,
transformer_blocks, norm_out, proj_out). So LoRA/DoRA added with `wrapped.add_adapter(...)`,
per-block checkpointing (`enable_gradient_checkpointing()` or the trainer's
`apply_checkpointing`, which patches `block.forward`), `block.compile()` and swapping
`crossattn_proj` for an Identity (projected text caches) all keep working.

The only new parameters are the view embedding; they are saved as `multiview.safetensors`
plus `multiview.json` (V, roles, attention mode) beside an adapter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from worldtune.atomic import atomic_write_json
from worldtune.errors import CheckpointError, ModelError

AttentionMode = Literal["joint", "per_view"]
ATTENTION_MODES: tuple[str, ...] = ("joint", "per_view")
EXTRAS_WEIGHTS = "multiview.safetensors"
EXTRAS_CONFIG = "multiview.json"
EXTRAS_FORMAT, EXTRAS_VERSION = "worldtune.multiview", 1


class MultiViewTransformer(nn.Module):
    """Wraps a single-view `CosmosTransformer3DModel`; input latents [B, C, V·T, H, W], views stacked in time.

    >>> mv = MultiViewTransformer(transformer, num_views=3, roles=["exterior_1", "exterior_2", "wrist"])
    >>> out = mv(hidden_states=x, timestep=t, encoder_hidden_states=text, condition_mask=m,
    ...          padding_mask=p, return_dict=False)[0]            # x: [B, 16, 3*T, H, W]
    """

    def __init__(self, transformer: nn.Module, num_views: int, attention: AttentionMode = "joint",
                 roles: list[str] | None = None) -> None:
        super().__init__()
        if num_views < 1:
            raise ModelError(f"num_views must be >= 1, got {num_views}")
        if attention not in ATTENTION_MODES:
            raise ModelError(f"multi-view attention {attention!r}: use one of {', '.join(ATTENTION_MODES)}")
        if roles is not None and len(roles) != num_views:
            raise ModelError(f"{len(roles)} roles {roles} for {num_views} views: give one role per view")
        cfg = transformer.config
        if tuple(cfg.patch_size)[0] != 1:
            raise ModelError(f"temporal patch size {cfg.patch_size[0]} != 1: views could not be stacked frame-wise")
        self.transformer = transformer
        self.num_views = num_views
        self.attention = attention
        self.roles = list(roles) if roles is not None else None
        hidden = cfg.num_attention_heads * cfg.attention_head_dim
        p = next(transformer.parameters())
        # fp32 even on a bf16 base: like LoRA parameters, it starts at 0 and takes tiny updates
        self.view_embed = nn.Parameter(torch.zeros(num_views, hidden, device=p.device, dtype=torch.float32))

    # -- what callers of a diffusers transformer read
    @property
    def config(self):
        return self.transformer.config

    @property
    def dtype(self) -> torch.dtype:
        return self.transformer.dtype

    @property
    def device(self) -> torch.device:
        return self.transformer.device

    @property
    def transformer_blocks(self) -> nn.ModuleList:
        return self.transformer.transformer_blocks

    def extra_parameters(self) -> list[nn.Parameter]:
        """The parameters the wrapper adds (train them with the adapter: they start at zero)."""
        return [self.view_embed]

    # -- forward
    def forward(self, hidden_states: torch.Tensor, timestep: torch.Tensor, encoder_hidden_states: torch.Tensor,
                attention_mask: torch.Tensor | None = None, fps: int | None = None,
                condition_mask: torch.Tensor | None = None, padding_mask: torch.Tensor | None = None,
                return_dict: bool = True, num_views: int | None = None):
        """CosmosTransformer3DModel.forward's interface, for views stacked along time.

        timestep: [B] (one per sample) or [B, 1, V·T, 1, 1] (per frame); condition_mask
        [B, 1, V·T, H, W]; padding_mask [1, 1, H_px, W_px]; `attention_mask` masks text tokens.
        Returns ([B, C_out, V·T, H, W],) or an object with `.sample`, like the wrapped model.
        """
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms.functional import resize

        model, cfg = self.transformer, self.transformer.config
        v = self.num_views if num_views is None else num_views
        if v > self.view_embed.shape[0]:
            raise ModelError(f"num_views={v} but the view embedding has {self.view_embed.shape[0]} rows")
        b, _, frames, height, width = hidden_states.shape
        if frames % v:
            raise ModelError(f"{frames} latent frames cannot hold {v} views of equal length")
        t = frames // v

        # 1. extra input channels: condition mask, padding mask (as the wrapped model does)
        if condition_mask is not None:
            hidden_states = torch.cat([hidden_states, condition_mask], dim=1)
        if cfg.concat_padding_mask:
            pad = resize(padding_mask, list(hidden_states.shape[-2:]), interpolation=InterpolationMode.NEAREST)
            hidden_states = torch.cat([hidden_states, pad.unsqueeze(2).repeat(b, 1, frames, 1, 1)], dim=1)
        if attention_mask is not None:
            attention_mask = attention_mask.unsqueeze(1).unsqueeze(1)

        # 2. positions of ONE view (frame indices 0..T-1), repeated for every view when joint
        one_view = hidden_states[:, :, :t]
        cos, sin = model.rope(one_view, fps=fps)
        extra_pos = model.learnable_pos_embed(one_view) if cfg.extra_pos_embed_type else None
        if self.attention == "joint" and v > 1:
            cos, sin = cos.repeat(v, 1), sin.repeat(v, 1)
            extra_pos = extra_pos.repeat(1, v, 1) if extra_pos is not None else None

        # 3. patchify and add the view embedding
        _, p_h, p_w = cfg.patch_size
        hp, wp = height // p_h, width // p_w
        tokens_per_view = t * hp * wp
        x = model.patch_embed(hidden_states).flatten(1, 3)  # [B, V*T*hp*wp, D]
        x = x + self.view_embed[:v].to(x.dtype).repeat_interleave(tokens_per_view, dim=0)

        # 4. timestep embeddings (per sample or per frame)
        if timestep.ndim == 1:
            temb, emb_t = model.time_embed(x, timestep)
        elif timestep.ndim == 5:
            if timestep.shape != (b, 1, frames, 1, 1):
                raise ModelError(f"timestep has shape {tuple(timestep.shape)}, expected {(b, 1, frames, 1, 1)}")
            temb, emb_t = model.time_embed(x, timestep.flatten())
            temb, emb_t = (e.view(b, frames, 1, 1, -1).expand(-1, -1, hp, wp, -1).flatten(1, 3) for e in (temb, emb_t))
        else:
            raise ModelError(f"timestep must be [B] or [B, 1, T, 1, 1], got shape {tuple(timestep.shape)}")

        # 5. text
        text = encoder_hidden_states
        if isinstance(text, tuple):
            raise ModelError("image-context conditioning (Transfer2.5) is not supported by the multi-view wrapper")
        if cfg.use_crossattn_projection:
            text = model.crossattn_proj(text)

        # 6. blocks: joint over all tokens, or views folded into the batch
        per_view = self.attention == "per_view" and v > 1
        if per_view:
            x = x.reshape(b * v, tokens_per_view, -1)
            text = text.repeat_interleave(v, dim=0)
            attention_mask = attention_mask.repeat_interleave(v, dim=0) if attention_mask is not None else None
            temb, emb_t = (_fold(e, b, v) for e in (temb, emb_t))
            extra_pos = extra_pos.repeat_interleave(v, dim=0) if extra_pos is not None else None
        for block in model.transformer_blocks:
            args = (x, text, emb_t, temb, (cos, sin), extra_pos, attention_mask, None)
            if torch.is_grad_enabled() and getattr(model, "gradient_checkpointing", False):
                x = model._gradient_checkpointing_func(block, *args)
            else:
                x = block(*args)
        if per_view:
            x = x.reshape(b, v * tokens_per_view, -1)
            temb, emb_t = (_unfold(e, b, v) for e in (temb, emb_t))

        # 7. output norm, projection, unpatchify (the wrapped model's exact token order)
        x = model.proj_out(model.norm_out(x, emb_t, temb))
        x = x.unflatten(2, (p_h, p_w, 1, -1)).unflatten(1, (frames, hp, wp))
        x = x.permute(0, 7, 1, 6, 2, 4, 3, 5).flatten(6, 7).flatten(4, 5).flatten(2, 3)
        if not return_dict:
            return (x,)
        from diffusers.models.modeling_outputs import Transformer2DModelOutput

        return Transformer2DModelOutput(sample=x)


def _fold(e: torch.Tensor, b: int, v: int) -> torch.Tensor:
    """Timestep embedding to the views-in-batch layout: per token [B, V·L, D] -> [B·V, L, D];
    per sample [B, D] -> [B·V, D]."""
    return e.reshape(b * v, e.shape[1] // v, e.shape[2]) if e.ndim == 3 else e.repeat_interleave(v, dim=0)


def _unfold(e: torch.Tensor, b: int, v: int) -> torch.Tensor:
    return e.reshape(b, v * e.shape[1], e.shape[2]) if e.ndim == 3 else e[::v]


# ------------------------------------------------------------------------------------ stacking
def stack_views(latents_per_view: dict[str, torch.Tensor], roles: list[str]) -> torch.Tensor:
    """{role: [C, T, H, W]} -> [C, V·T, H, W] in `roles` order (the multi-view model's layout)."""
    missing = [r for r in roles if r not in latents_per_view]
    if missing:
        raise ModelError(f"views {missing} missing: have {sorted(latents_per_view)}")
    shapes = {tuple(latents_per_view[r].shape) for r in roles}
    if len(shapes) != 1:
        raise ModelError(f"views have different latent shapes {sorted(shapes)}: prepare them at one size")
    return torch.cat([latents_per_view[r] for r in roles], dim=1)


def unstack_views(x: torch.Tensor, num_views: int) -> torch.Tensor:
    """[B, C, V·T, H, W] -> [B, C, V, T, H, W]."""
    b, c, f, h, w = x.shape
    if f % num_views:
        raise ModelError(f"{f} frames cannot hold {num_views} views of equal length")
    return x.view(b, c, num_views, f // num_views, h, w)


def multiview_flow_batch(objective, x0_views: torch.Tensor, seeds: list[int], sigma: list[float] | None = None,
                         num_cond: list[int] | None = None):
    """A FlowBatch for stacked views: the first k latent frames of EVERY view are the clean condition.

    x0_views: [B, C, V, T, H, W]. The draws (noise, sigma, k, text dropout) are exactly
    `objective.prepare`'s for the stacked [B, C, V·T, H, W] clip and the same seeds; only the
    conditioning moves from "first k frames of the clip" to "first k frames of each view".
    `FlowMatchingLoss.loss` and `transformer_inputs` then apply unchanged.
    """
    from worldtune.train.flow import FlowBatch

    b, c, v, t, h, w = x0_views.shape
    x0 = x0_views.float().reshape(b, c, v * t, h, w)
    fb = objective.prepare(x0, seeds, sigma=sigma, num_cond=num_cond)
    noise = fb.target + x0
    k = fb.num_cond.clamp(max=t - 1)  # prepare clipped k to V·T-1; a view needs at least one free frame
    frame = torch.arange(t, device=x0.device).repeat(v)  # frame index within its view
    cond5 = (frame.view(1, v * t) < k.view(b, 1)).float().view(b, 1, v * t, 1, 1)
    s5 = fb.sigma.view(b, 1, 1, 1, 1)
    x_t = cond5 * x0 + (1 - cond5) * (s5 * noise + (1 - s5) * x0)
    timestep = cond5 * objective.cond_timestep + (1 - cond5) * s5
    return FlowBatch(x_t=x_t, target=fb.target, timestep=timestep, condition_mask=cond5.expand(b, 1, v * t, h, w),
                     loss_mask=1 - cond5, text_keep=fb.text_keep, sigma=fb.sigma, num_cond=k)


# ------------------------------------------------------------------------------------- extras
def save_multiview_extras(out: str | Path, model: MultiViewTransformer) -> Path:
    """Write `multiview.safetensors` (view embedding) and `multiview.json` into `out` (beside an adapter)."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"format": EXTRAS_FORMAT, "version": EXTRAS_VERSION, "num_views": model.num_views,
            "attention": model.attention, "roles": model.roles,
            "hidden_size": int(model.view_embed.shape[1])}
    save_file({"view_embed": model.view_embed.detach().float().contiguous().cpu()}, str(out / EXTRAS_WEIGHTS),
              metadata={"format": EXTRAS_FORMAT, "version": str(EXTRAS_VERSION)})
    atomic_write_json(out / EXTRAS_CONFIG, meta)
    return out


def read_multiview_config(path: str | Path) -> dict[str, Any]:
    """`multiview.json` of a folder (or the file itself), checked."""
    p = Path(path)
    p = p / EXTRAS_CONFIG if p.is_dir() else p
    if not p.is_file():
        raise CheckpointError(f"{p} does not exist: a multi-view adapter folder holds {EXTRAS_CONFIG} and "
                              f"{EXTRAS_WEIGHTS} (written by save_multiview_extras)")
    meta = json.loads(p.read_text())
    if meta.get("format") != EXTRAS_FORMAT or meta.get("version") != EXTRAS_VERSION:
        raise CheckpointError(f"{p}: not a {EXTRAS_FORMAT} v{EXTRAS_VERSION} file")
    return meta


def load_multiview_extras(path: str | Path, model: MultiViewTransformer) -> MultiViewTransformer:
    """Load the view embedding (and attention mode, roles) saved by `save_multiview_extras` into `model`."""
    from safetensors.torch import load_file

    root = Path(path)
    meta = read_multiview_config(root)
    if meta["num_views"] != model.num_views or meta["hidden_size"] != model.view_embed.shape[1]:
        raise CheckpointError(f"{root}: saved for {meta['num_views']} views x {meta['hidden_size']} but the model has "
                              f"{model.num_views} x {model.view_embed.shape[1]}: build the wrapper with the saved V")
    weights = load_file(str((root if root.is_dir() else root.parent) / EXTRAS_WEIGHTS))
    with torch.no_grad():
        model.view_embed.copy_(weights["view_embed"].to(model.view_embed.device, model.view_embed.dtype))
    model.attention = meta["attention"]
    model.roles = meta.get("roles")
    return model


def from_extras(path: str | Path, transformer: nn.Module) -> MultiViewTransformer:
    """A wrapper built to the saved V / roles / attention mode, with the saved view embedding."""
    meta = read_multiview_config(path)
    mv = MultiViewTransformer(transformer, meta["num_views"], meta["attention"], meta.get("roles"))
    return load_multiview_extras(path, mv)
