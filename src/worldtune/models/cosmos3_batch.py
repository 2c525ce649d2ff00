"""Several samples in one Cosmos 3 transformer call.

`Cosmos3OmniTransformer.forward` takes one packed sequence: a causal text ("understanding") prefix, then the
generation tokens (video, actions), which attend to the prefix and to each other. Training and validation used to
call it once per sample, so a small model's step was bound by kernel launches and Python (the seed model's
training step: ~4 s for 32 samples on an H200, the GPU ~5 % busy).

Every layer of the model acts per token except attention. So samples whose prefixes have one length and whose
generation parts have one length can share a call: sample b's prefix goes to [b*Lu, (b+1)*Lu) of the packed
buffer, its generation tokens to B*Lu + [b*Lg, (b+1)*Lg), and `BatchedAttention` attends within each sample
(the streams viewed as [B, L, heads, dim]). The result is the per-sample calls' to floating-point tolerance
(tests/models/test_cosmos3_batch.py). `call_grouped` groups a batch by those lengths, makes one call per group
and returns the outputs in the batch's order.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Callable

import torch

# (prefix tokens, generation tokens) of a merged call -> samples in it: the attention reads its batch from the
# lengths it is given, which also holds when activation checkpointing recomputes a layer during backward.
_BATCHES: dict[tuple[int, int], int] = {}
_INDEXES = ("vision_sequence_indexes", "vision_mse_loss_indexes", "action_sequence_indexes",
            "action_mse_loss_indexes")
_LISTS = ("vision_tokens", "vision_token_shapes", "vision_noisy_frame_indexes", "action_tokens",
          "action_token_shapes", "action_noisy_frame_indexes", "action_domain_ids")
_CATS = ("input_ids", "vision_timesteps", "action_timesteps")


@cache
def _processor_class():
    from diffusers.models.transformers.transformer_cosmos3 import Cosmos3AttnProcessor, _rotate_half
    from diffusers.models.attention_dispatch import dispatch_attention_fn

    class BatchedAttention(Cosmos3AttnProcessor):
        """Cosmos 3's dual-pathway attention over a buffer of B samples laid out as `merge_inputs` does."""

        def __call__(self, attn, und_seq: torch.Tensor, gen_seq: torch.Tensor, rotary_emb):
            b = _BATCHES.get((und_seq.shape[0], gen_seq.shape[0]), 1)
            if b == 1:
                return super().__call__(attn, und_seq, gen_seq, rotary_emb)
            heads, kv, dim = attn.num_attention_heads, attn.num_key_value_heads, attn.head_dim
            cos_u, sin_u, cos_g, sin_g = (r.unsqueeze(1) for r in rotary_emb)

            def rope(x, cos, sin):
                return x * cos + _rotate_half(x) * sin

            q_u = rope(attn.norm_q(attn.to_q(und_seq).view(-1, heads, dim)), cos_u, sin_u)
            k_u_raw = attn.norm_k(attn.to_k(und_seq).view(-1, kv, dim))
            k_u_gen = attn.k_norm_und_for_gen(k_u_raw) if attn.k_norm_und_for_gen is not None else k_u_raw
            k_u, k_u_gen = rope(k_u_raw, cos_u, sin_u), rope(k_u_gen, cos_u, sin_u)
            v_u = attn.to_v(und_seq).view(-1, kv, dim)
            q_g = rope(attn.norm_added_q(attn.add_q_proj(gen_seq).view(-1, heads, dim)), cos_g, sin_g)
            k_g = rope(attn.norm_added_k(attn.add_k_proj(gen_seq).view(-1, kv, dim)), cos_g, sin_g)
            v_g = attn.add_v_proj(gen_seq).view(-1, kv, dim)

            def per_sample(x):  # [B*L, h, d] -> [B, L, h, d]
                return x.view(b, -1, *x.shape[1:])

            kw = dict(enable_gqa=True, backend=self._attention_backend, parallel_config=self._parallel_config)
            und = dispatch_attention_fn(per_sample(q_u), per_sample(k_u), per_sample(v_u), is_causal=True, **kw)
            gen = dispatch_attention_fn(per_sample(q_g), torch.cat([per_sample(k_u_gen), per_sample(k_g)], 1),
                                        torch.cat([per_sample(v_u), per_sample(v_g)], 1), is_causal=False, **kw)
            return attn.to_out(und.flatten(0, 1).flatten(-2)), attn.to_add_out(gen.flatten(0, 1).flatten(-2))

    return BatchedAttention


def install(transformer: torch.nn.Module) -> None:
    """Give every attention module of a Cosmos 3 transformer the batched processor (once; it behaves as the stock
    one for a call of one sample), keeping each processor's backend settings."""
    cls = _processor_class()
    for module in transformer.modules():
        proc = getattr(module, "processor", None)
        if type(proc) is cls.__base__:  # the stock processor: its settings stay, its class changes
            proc.__class__ = cls


def merge_inputs(kws: list[dict[str, Any]]) -> dict[str, Any]:
    """One call's keyword arguments from B samples' (`transformer_inputs` / `action_run_inputs`), which must share
    their prefix length and sequence length."""
    n = len(kws)
    lu, length = kws[0]["und_len"], kws[0]["sequence_length"]
    lg = length - lu
    if any(k["und_len"] != lu or k["sequence_length"] != length for k in kws):
        raise ValueError("merge_inputs: every sample needs the same prefix and sequence length")

    def place(idx: torch.Tensor, b: int) -> torch.Tensor:
        return torch.where(idx < lu, b * lu + idx, n * lu + b * lg + (idx - lu))

    dev = kws[0]["position_ids"].device
    every = torch.arange(length, device=dev)
    position_ids = kws[0]["position_ids"].new_zeros(kws[0]["position_ids"].shape[0], n * length)
    for b, k in enumerate(kws):
        position_ids[:, place(every, b)] = k["position_ids"]
    out: dict[str, Any] = {"und_len": n * lu, "sequence_length": n * length, "position_ids": position_ids,
                           "return_dict": False,
                           "text_indexes": torch.cat([place(k["text_indexes"], b) for b, k in enumerate(kws)])}
    for key in _INDEXES:
        if key in kws[0]:
            out[key] = torch.cat([place(k[key], b) for b, k in enumerate(kws)])
    for key in _LISTS:
        if key in kws[0]:
            out[key] = [x for k in kws for x in k[key]]
    for key in _CATS:
        if key in kws[0]:
            out[key] = torch.cat([k[key] for k in kws])
    key = (n * lu, n * lg)
    if _BATCHES.setdefault(key, n) != n:
        raise ValueError(f"merge_inputs: two groups of {_BATCHES[key]} and {n} samples give one buffer shape")
    return out


def call_grouped(model: torch.nn.Module, kws: list[dict[str, Any]],
                 call: Callable[..., Any] | None = None) -> list[tuple[Any, Any, Any]]:
    """(video, sound, action) predictions of each sample, one model call per group of samples whose sequences
    have the same shape (`model` may carry adapters or wrappers: `install` finds the attention modules inside).
    `call(**merged)` makes the call (default `model` itself; forward-dynamics serving passes a `StaticCall`)."""
    install(model)
    call = call or model
    groups: dict[tuple[int, int, bool], list[int]] = {}
    for i, k in enumerate(kws):
        groups.setdefault((k["und_len"], k["sequence_length"], "action_tokens" in k), []).append(i)
    outs: list[Any] = [None] * len(kws)
    _BATCHES.clear()  # the last batch's backward (and its recomputed layers) is done
    for members in groups.values():
        video, sound, action = call(**merge_inputs([kws[i] for i in members]))
        for j, i in enumerate(members):
            outs[i] = (video[j], sound[j] if sound is not None else None, action[j] if action is not None else None)
    return outs
