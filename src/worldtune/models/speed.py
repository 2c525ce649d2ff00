"""Speed switches of the Cosmos DiT (training and generation), applied to a plain `CosmosTransformer3DModel` in place.

Each switch computes the same function as diffusers' eager code (within bf16 rounding), keeps
every module and state-dict key name, and works under peft LoRA/DoRA on the attention and MLP
linears, under checkpointing and under `torch.compile`:

- **fused adaLN** (`fuse_adaln_per_frame`): with a per-frame (5-D) timestep, diffusers expands the
  time embeddings to every token before the blocks, so each block's three adaLN-LoRA modulation
  MLPs (D -> 256 -> 3D) run on all T*H*W tokens and autograd keeps [N, 3D] modulation tensors.
  Their values only change per frame: computing them on [B, T, C] and broadcasting at the
  multiply saves ~3% of the forward FLOPs and ~1.2 KB per token per block (models/memory.py).
- **compile** (`compile_blocks`): regional `torch.compile` of each block; all blocks share one
  graph, so it compiles once.
- **attention** (`set_attention`): pins PyTorch SDPA to one kernel (cudnn, flash, efficient or
  math) inside each block, so the recomputation of checkpointed blocks uses the same kernel.
- **CUDA graphs**: `compile_blocks(mode="reduce-overhead")`; call `mark_step()` at each step.
- **memory-aware checkpointing**: `per_block_bytes` feeds the trainer's `choose_checkpointing`.
- **selective checkpointing** (`apply_selective_checkpointing`): recompute a block in backward
  except its attention kernels, whose outputs are kept. Self-attention is 68% of a 2B forward at
  432x768 (85% at 704x1280) but its output is one [N, D] tensor per block, so this removes most of
  the recompute cost for ~0.26 GB per block at 432x768.

Block switches live on a subclass of the block's class (same name plus a `Speed` prefix, same
modules), so all blocks keep one `forward` code object and one compiled graph. Call
`apply_speed` after the adapters are added; before or after the trainer's `apply_checkpointing`
(a checkpoint wrapper already on a block is re-pointed at the new forward).
"""

from __future__ import annotations

import functools
import types
from contextlib import nullcontext
from typing import Any, Mapping

import torch

from worldtune.errors import ConfigError, ModelError

ATTENTION_BACKENDS = ("cudnn", "flash", "efficient", "math")


# ----------------------------------------------------------------------------------- attention
def sdpa_backend(name: str | None):
    """The `torch.nn.attention.SDPBackend` of a short name (None = PyTorch's own choice)."""
    if name is None:
        return None
    from torch.nn.attention import SDPBackend

    table = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
             "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    if name not in table:
        raise ConfigError(f"attention={name!r}: use one of {', '.join(ATTENTION_BACKENDS)} (or none for the default)")
    return table[name]


def attention_context(name: str | None):
    """A context that restricts SDPA to one kernel (a null context for None)."""
    backend = sdpa_backend(name)
    if backend is None:
        return nullcontext()
    from torch.nn.attention import sdpa_kernel

    return sdpa_kernel([backend])


# ------------------------------------------------------------------------------- fused adaLN math
def _per_frame(emb: torch.Tensor) -> torch.Tensor:
    """[B, C] (one timestep per sample) -> [B, 1, C]; [B, F, C] stays (F frames, or F = tokens)."""
    return emb.unsqueeze(1) if emb.ndim == 2 else emb


def _modulation(norm: torch.nn.Module, emb: torch.Tensor, temb: torch.Tensor | None, parts: int):
    """adaLN-LoRA of one norm on per-frame embeddings: `parts` tensors of shape [B, F, 1, D]."""
    mod = norm.linear_2(norm.linear_1(norm.activation(emb)))
    if temb is not None:
        mod = mod + temb[..., : mod.shape[-1]]
    return mod.unsqueeze(2).chunk(parts, dim=-1)


def _modulate(norm: torch.nn.Module, x: torch.Tensor, emb: torch.Tensor, temb: torch.Tensor | None, parts: int):
    """norm(x) * (1 + scale) + shift with per-frame scale/shift broadcast over each frame's tokens."""
    b, n, d = x.shape
    frames = emb.shape[1]
    mods = _modulation(norm, emb, temb, parts)
    y = norm.norm(x).view(b, frames, n // frames, d) * (1 + mods[1]) + mods[0]
    return y.view(b, n, d), (mods[2] if parts == 3 else None)


def _gated_residual(x: torch.Tensor, gate: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """x + gate * out with a per-frame gate [B, F, 1, D]."""
    b, n, d = x.shape
    frames = gate.shape[1]
    return x + (gate * out.view(b, frames, n // frames, d)).view(b, n, d)


def _fused_block_forward(block, hidden_states, encoder_hidden_states, embedded_timestep, temb=None,
                         image_rotary_emb=None, extra_pos_emb=None, attention_mask=None, controlnet_residual=None,
                         latents=None, block_idx=None):
    """A CosmosTransformerBlock forward that takes per-frame (or per-sample) time embeddings."""
    x = hidden_states
    emb = _per_frame(embedded_timestep)
    temb = _per_frame(temb) if temb is not None else None
    if extra_pos_emb is not None:
        x = x + extra_pos_emb
    y, gate = _modulate(block.norm1, x, emb, temb, 3)
    x = _gated_residual(x, gate, block.attn1(y, image_rotary_emb=image_rotary_emb))
    y, gate = _modulate(block.norm2, x, emb, temb, 3)
    x = _gated_residual(x, gate, block.attn2(y, encoder_hidden_states=encoder_hidden_states,
                                             attention_mask=attention_mask))
    y, gate = _modulate(block.norm3, x, emb, temb, 3)
    x = _gated_residual(x, gate, block.ff(y))
    if controlnet_residual is not None:
        x = x + controlnet_residual
    return x


def _speed_block_forward(self, *args, **kwargs):
    """Forward of the Speed block subclass: the chosen attention kernel, fused or plain adaLN."""
    with attention_context(self._worldtune_attention):
        if self._worldtune_fused:
            return _fused_block_forward(self, *args, **kwargs)
        return self._worldtune_base_forward(*args, **kwargs)


_SPEED_CLASSES: dict[type, type] = {}


def _speed_class(base: type) -> type:
    """One subclass per block class, so every block shares one forward (one compiled graph)."""
    if getattr(base, "_worldtune_speed", False):
        return base
    if base not in _SPEED_CLASSES:
        def base_forward(self, *args, **kwargs):
            return base.forward(self, *args, **kwargs)

        _SPEED_CLASSES[base] = type(f"Speed{base.__name__}", (base,), {
            "forward": _speed_block_forward, "_worldtune_base_forward": base_forward, "_worldtune_speed": True,
            "__module__": __name__})
    return _SPEED_CLASSES[base]


def _is_block_forward(block: torch.nn.Module, fn: Any) -> bool:
    """Is `fn` the block's own forward (of its class or any base), bound to this block?"""
    func = getattr(fn, "__func__", None)
    return getattr(fn, "__self__", None) is block and any(c.__dict__.get("forward") is func for c in type(block).__mro__)


def _configure_block(block: torch.nn.Module, **settings: Any) -> None:
    """Swap the block to its Speed class, set switches, and re-point a checkpoint wrapper if any."""
    if getattr(block, "before_proj", None) is not None or getattr(block, "after_proj", None) is not None:
        raise ModelError("speed switches support plain Cosmos DiT blocks, not ControlNet (Transfer) blocks")
    if not getattr(type(block), "_worldtune_speed", False):
        block.__dict__.setdefault("_worldtune_fused", False)
        block.__dict__.setdefault("_worldtune_attention", None)
        block.__class__ = _speed_class(type(block))
    for k, v in settings.items():
        setattr(block, f"_worldtune_{k}", v)
    wrapper = block.__dict__.get("forward")
    if wrapper is None:
        return
    if isinstance(wrapper, functools.partial) and wrapper.args and _is_block_forward(block, wrapper.args[0]):
        block.forward = functools.partial(wrapper.func, types.MethodType(type(block).forward, block),
                                          *wrapper.args[1:], **wrapper.keywords)
        return
    raise ModelError("a transformer block's forward was replaced by something other than a checkpoint wrapper; "
                     "apply the speed switches before other patches")


def repeated_blocks(transformer: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer's repeated blocks, in order: the modules diffusers never splits across devices
    (`_no_split_modules`, or a subclass: the fused-adaLN block), which are the units of checkpointing,
    compiling and FSDP sharding."""
    names = set(getattr(transformer, "_no_split_modules", None) or ())
    blocks = [m for m in transformer.modules() if any(c.__name__ in names for c in type(m).__mro__)]
    if not blocks:
        raise ModelError(f"{type(transformer).__name__} declares no repeated blocks (_no_split_modules)")
    return blocks


# ------------------------------------------------------------------------------ the model forward
def _final_layer(model, x: torch.Tensor, emb: torch.Tensor, temb: torch.Tensor | None, shape) -> torch.Tensor:
    """norm_out (per-frame adaLN), proj_out and unpatchify back to [B, C, T, H, W]."""
    x, _ = _modulate(model.norm_out, x, emb, temb, 2)
    x = model.proj_out(x)
    (p_t, p_h, p_w), (t, h, w) = model.config.patch_size, shape
    # proj_out packs each token's output as (p_h, p_w, p_t, C); put every patch axis after its grid axis
    x = x.unflatten(2, (p_h, p_w, p_t, -1)).unflatten(1, (t, h, w))  # [B, t, h, w, p_h, p_w, p_t, C]
    x = x.permute(0, 7, 1, 6, 2, 4, 3, 5)  # [B, C, t, p_t, h, p_h, w, p_w]
    return x.flatten(6, 7).flatten(4, 5).flatten(2, 3)


def _fused_model_forward(self, hidden_states: torch.Tensor, timestep: torch.Tensor, encoder_hidden_states,
                         block_controlnet_hidden_states=None, attention_mask=None, fps=None, condition_mask=None,
                         padding_mask=None, return_dict: bool = True):
    """CosmosTransformer3DModel.forward with time embeddings kept per frame ([B, T, C]) into the blocks."""
    if block_controlnet_hidden_states is not None or isinstance(encoder_hidden_states, tuple):
        raise ModelError("fused adaLN supports the plain Cosmos DiT (no ControlNet residuals or image context)")
    b, _, t, h, w = hidden_states.shape
    x = hidden_states
    if condition_mask is not None:
        x = torch.cat([x, condition_mask], dim=1)
    if self.config.concat_padding_mask:
        pm = padding_mask
        if tuple(pm.shape[-2:]) != (h, w):
            pm = torch.nn.functional.interpolate(pm.float(), size=(h, w), mode="nearest").to(pm.dtype)
        x = torch.cat([x, pm.unsqueeze(2).repeat(b, 1, t, 1, 1)], dim=1)
    if attention_mask is not None:
        attention_mask = attention_mask.unsqueeze(1).unsqueeze(1)
    rope = self.rope(x, fps=fps)
    extra_pos = self.learnable_pos_embed(x) if self.learnable_pos_embed is not None else None
    p_t, p_h, p_w = self.config.patch_size
    grid = (t // p_t, h // p_h, w // p_w)
    x = self.patch_embed(x).flatten(1, 3)  # [B, N, D]
    if timestep.ndim == 1:
        temb, emb = (e.unsqueeze(1) for e in self.time_embed(x, timestep))  # [B, 1, C]
    elif timestep.ndim == 5:
        if tuple(timestep.shape) != (b, 1, t, 1, 1) or p_t != 1:
            raise ModelError(f"per-frame timestep must be [B, 1, T, 1, 1] = {(b, 1, t, 1, 1)} with temporal patch 1, "
                             f"got {tuple(timestep.shape)}")
        temb, emb = (e.view(b, t, -1) for e in self.time_embed(x, timestep.flatten()))  # [B, T, C]
    else:
        raise ModelError(f"timestep must be [B] or [B, 1, T, 1, 1], got {tuple(timestep.shape)}")
    text = encoder_hidden_states
    if self.config.use_crossattn_projection:
        text = self.crossattn_proj(text)
    for block in self.transformer_blocks:
        args = (x, text, emb, temb, rope, extra_pos, attention_mask, None)
        if torch.is_grad_enabled() and self.gradient_checkpointing:
            x = self._gradient_checkpointing_func(block, *args)
        else:
            x = block(*args)
    out = _final_layer(self, x, emb, temb, grid)
    if not return_dict:
        return (out,)
    from diffusers.models.modeling_outputs import Transformer2DModelOutput

    return Transformer2DModelOutput(sample=out)


# ------------------------------------------------------------------------------------- switches
def fuse_adaln_per_frame(transformer: torch.nn.Module) -> None:
    """Compute the adaLN-LoRA modulations per frame instead of per token (same outputs, fewer FLOPs)."""
    for block in repeated_blocks(transformer):
        _configure_block(block, fused=True)
    transformer.forward = types.MethodType(_fused_model_forward, transformer)


def set_attention(transformer: torch.nn.Module, name: str | None) -> None:
    """Pin SDPA to one kernel in every block (forward, backward and checkpoint recompute)."""
    sdpa_backend(name)  # validate
    for block in repeated_blocks(transformer):
        _configure_block(block, attention=name)


def compile_blocks(transformer: torch.nn.Module, mode: str | None = None, dynamic: bool | None = False) -> int:
    """Regional `torch.compile`: each block compiled in place (one shared graph); returns the count.

    `dynamic=None` (a model whose sequence length varies, e.g. text tokens in the sequence) recompiles
    once with the changed length marked dynamic instead of once per length."""
    blocks = repeated_blocks(transformer)
    for block in blocks:
        block.compile(mode=mode, dynamic=dynamic)
    return len(blocks)


def mark_step(transformer: torch.nn.Module) -> None:
    """Tell CUDA-graph trees a new training step begins (needed with cuda_graphs, a no-op otherwise)."""
    if getattr(transformer, "_worldtune_cuda_graphs", False):
        torch.compiler.cudagraph_mark_step_begin()


def apply_speed(transformer: torch.nn.Module, *, fused_adaln: bool = True, compile: bool = False,
                cuda_graphs: bool = False, attention: str | None = None,
                dynamic: bool | None = False) -> dict[str, Any]:
    """Apply the chosen switches in place and return them (for run.json / the benchmark table).

    Call after the adapters are added. CUDA graphs imply compile (`mode="reduce-overhead"`) and need
    `mark_step(transformer)` at the start of every step; they are refused off CUDA.
    """
    device = next(transformer.parameters()).device
    if cuda_graphs and device.type != "cuda":
        raise ConfigError("cuda_graphs needs a CUDA device: turn it off on CPU")
    if attention in ("cudnn", "flash") and device.type != "cuda":
        raise ConfigError(f"attention={attention!r} needs a CUDA device: use efficient, math or none")
    if fused_adaln:
        fuse_adaln_per_frame(transformer)
    if attention is not None:
        set_attention(transformer, attention)
    compiled = 0
    if compile or cuda_graphs:
        compiled = compile_blocks(transformer, mode="reduce-overhead" if cuda_graphs else None, dynamic=dynamic)
    transformer._worldtune_cuda_graphs = bool(cuda_graphs)
    return {"fused_adaln": bool(fused_adaln), "compile": bool(compile or cuda_graphs), "compiled_blocks": compiled,
            "cuda_graphs": bool(cuda_graphs), "attention": attention or "default"}


# ------------------------------------------------------------------------- selective checkpointing
_ATTENTION_OPS = ("_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention",
                  "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention_for_cpu")


@functools.lru_cache(maxsize=1)
def _saved_ops() -> frozenset:
    ops = (getattr(torch.ops.aten, name, None) for name in _ATTENTION_OPS)
    return frozenset(op.default for op in ops if op is not None and hasattr(op, "default"))


def _keep_attention_policy(ctx, op, *args, **kwargs):
    """Save the attention kernels' outputs; recompute everything else (projections, norms, MLP)."""
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op in _saved_ops() else CheckpointPolicy.PREFER_RECOMPUTE


def _keep_attention_context():
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(_keep_attention_policy)


def _selective_checkpoint(fwd, *args, **kwargs):
    if torch.is_grad_enabled():
        from torch.utils.checkpoint import checkpoint

        return checkpoint(fwd, *args, use_reentrant=False, context_fn=_keep_attention_context, **kwargs)
    return fwd(*args, **kwargs)


def apply_selective_checkpointing(transformer: torch.nn.Module, blocks: list[int]) -> None:
    """Checkpoint the chosen blocks but keep their attention outputs (no attention recompute).

    Same wrapper shape as the trainer's `apply_checkpointing` (use one or the other per block);
    names and state dicts are unchanged.
    """
    all_blocks = repeated_blocks(transformer)
    for i in blocks:
        block = all_blocks[i]
        block.forward = functools.partial(_selective_checkpoint, block.forward)


# ------------------------------------------------------------------------------ checkpoint memory
def per_block_bytes(cfg: Any, latent_t: int, latent_h: int, latent_w: int, batch: int = 1, mode: str = "lora",
                    fused_adaln: bool = False, rank: int = 32, text_tokens: int | None = None) -> float:
    """Activation bytes one un-checkpointed block keeps for a step (models/memory.py's estimator).

    `cfg` is a ModelSpec or a transformer config mapping; the clip is given in latent frames and
    latent pixels (H/8, W/8). Fused adaLN drops the per-token modulation tensors (the 1-D layout
    of the estimator). For `choose_checkpointing(..., per_block_bytes=...)` with "auto".
    """
    from worldtune.models.activations import BlockDims, block_bytes_per_text_token, block_bytes_per_token, dora_block_constant

    spec_tokens = getattr(cfg, "max_sequence_length", None)
    tcfg: Mapping[str, Any] = cfg.transformer if hasattr(cfg, "transformer") else cfg
    if mode not in ("lora", "dora", "full"):
        raise ConfigError(f"mode must be lora, dora or full, got {mode!r}")
    p_t, p_h, p_w = (int(p) for p in tcfg.get("patch_size", (1, 2, 2)))
    tokens = batch * (latent_t // p_t) * (latent_h // p_h) * (latent_w // p_w)
    text = batch * (text_tokens or spec_tokens or 512)
    dims = BlockDims.from_config(tcfg)
    total = tokens * block_bytes_per_token(dims, mode, rank, per_token_timestep=not fused_adaln)
    total += text * block_bytes_per_text_token(dims, mode, rank)
    if mode == "dora":
        total += dora_block_constant(dims, rank)
    return float(total)
