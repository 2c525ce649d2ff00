"""Activation-memory model vs what autograd really saves, the planner's verdicts, `model info`."""

from __future__ import annotations

import json

import pytest
import torch
from rich.console import Console
from torch.autograd.graph import saved_tensors_hooks

from worldtune.errors import ModelError
from worldtune.models.build import build_transformer
from worldtune.models.info import print_info
from worldtune.models.memory import BlockDims, block_bytes_per_text_token, block_bytes_per_token, \
    estimate_activations, memory_lines, plan, uses_selective_checkpointing
from worldtune.models.params import count_transformer_params, largest_block_params
from worldtune.models.registry import get_spec

RANK = 4


def _saved_bytes_of_block(mode: str, per_token: bool, latent_hw: tuple[int, int]) -> tuple[int, int]:
    """Bytes of distinct storages autograd saves inside block 1 of the tiny 2.5 model (params excluded)."""
    spec = get_spec("tiny-predict2.5")
    torch.manual_seed(0)
    model = build_transformer(spec, dtype=torch.bfloat16)
    if mode == "lora":
        from peft import LoraConfig

        model.requires_grad_(False)
        model.add_adapter(LoraConfig(r=RANK, lora_alpha=RANK, target_modules=list(spec.lora_targets)))
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()  # adapters in fp32, as the trainer keeps them
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}
    inside = [False]
    block = model.transformer_blocks[1]
    block.register_forward_pre_hook(lambda *a: inside.__setitem__(0, True))
    block.register_forward_hook(lambda *a: inside.__setitem__(0, False))

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if inside[0] and key not in params:
            seen.setdefault(key, t.untyped_storage().nbytes())
        return t

    t, (h, w) = 3, latent_hw
    bf = torch.bfloat16
    with saved_tensors_hooks(pack, lambda x: x):
        model(hidden_states=torch.randn(1, 16, t, h, w, dtype=bf), condition_mask=torch.zeros(1, 1, t, h, w, dtype=bf),
              padding_mask=torch.zeros(1, 1, h * 8, w * 8, dtype=bf),
              encoder_hidden_states=torch.randn(1, spec.max_sequence_length, spec.text_embed_dim, dtype=bf),
              timestep=(torch.rand(1, 1, t, 1, 1) if per_token else torch.rand(1)).to(bf), return_dict=False)
    return sum(seen.values()), t * (h // 2) * (w // 2)


@pytest.mark.parametrize("mode", ["lora", "full"])
@pytest.mark.parametrize("per_token", [True, False])
def test_activation_model_matches_saved_tensors(mode, per_token):
    spec = get_spec("tiny-predict2.5")
    dims = BlockDims.from_config(spec.transformer)
    measured, tokens = _saved_bytes_of_block(mode, per_token, (16, 32))
    model = (tokens * block_bytes_per_token(dims, mode, RANK, per_token)
             + spec.max_sequence_length * block_bytes_per_text_token(dims, mode, RANK))
    # CPU LayerNorm keeps its statistics in bf16 (GPU: fp32), and per-sample vectors are not modelled
    assert model == pytest.approx(measured, rel=0.02), (model, measured)


def test_calibration_against_h200_measurements():
    """Peaks measured on one H200 (benchmarks/memory_calibration.py, docs/benchmarks.md)."""
    spec = get_spec("cosmos-predict2.5-2b")
    pc = count_transformer_params(spec.transformer, spec.lora_targets, 32)
    block = largest_block_params(spec.transformer)
    for f, h, w, ckpt, per_token, measured in [(29, 432, 768, 0, True, 68.29), (29, 432, 768, 0, False, 54.86),
                                                (93, 432, 768, 28, True, 16.45), (93, 704, 1280, 28, True, 36.72)]:
        act = estimate_activations(spec.transformer, f, h, w, 1, "lora", 32, ckpt, 512, per_token)
        lines, _ = memory_lines(pc.total, pc.lora, block, act, "lora", 1, "none", False)
        estimate = sum(x.gib for x in lines)
        assert measured * 0.98 <= estimate <= measured * 1.08, (f, h, w, ckpt, estimate, measured)


def test_14b_full_on_one_gpu_does_not_fit_but_lora_does():
    spec = get_spec("cosmos-predict2-14b")
    full = plan(spec, "full", 93, 432, 768, gpus=1, gpu_mem_gb=141)
    assert not full.fits
    assert "18 B" in full.note and "14.27 B params" in full.note
    states = next(x for x in full.lines if "AdamW" in x.item)
    assert states.gib > 141  # 14.27e9 x 16 B of fp32 master, grads and Adam alone exceed the card
    lora = plan(spec, "lora", 93, 432, 768, gpus=1, gpu_mem_gb=141)
    assert lora.fits and lora.total_gib <= lora.usable_gib and not lora.offload
    eight = plan(spec, "full", 93, 432, 768, gpus=8, gpu_mem_gb=141)
    assert eight.fits and eight.sharding in ("grad_op", "full")


def test_planner_prefers_no_checkpointing_when_memory_allows():
    spec = get_spec("cosmos-predict2.5-2b")
    small = plan(spec, "lora", 29, 432, 768, gpus=1, gpu_mem_gb=141, memory_auto=True)
    assert small.fits and small.checkpointed_blocks == 0 and not small.selective
    tight = plan(spec, "lora", 93, 432, 768, gpus=1, gpu_mem_gb=20, memory_auto=True)
    assert tight.fits and tight.checkpointed_blocks == 28
    assert not plan(spec, "lora", 93, 704, 1280, gpus=1, gpu_mem_gb=16, memory_auto=True).fits


@pytest.mark.parametrize("name, height, width, measured_gib", [
    ("cosmos-predict2.5-2b", 432, 768, 18.79),  # B_sac, benchmarks/results/train_bench.json (held out of the fit)
    ("cosmos-predict2.5-2b", 704, 1280, 43.13),  # B_sac_704, same run
    ("cosmos-predict2-14b", 432, 768, 71.7),  # B_sac, benchmarks/results/train_bench_14b.json
])
def test_planner_default_is_the_trainers_selective_checkpointing(name, height, width, measured_gib):
    """The default plan is what the trainer runs on CUDA, and its total is the measured H200 peak within 10%."""
    assert uses_selective_checkpointing("auto", "cuda") and not uses_selective_checkpointing("auto", "cpu")
    assert not uses_selective_checkpointing("auto", "cuda", memory_auto=True)
    p = plan(get_spec(name), "lora", 93, height, width, gpus=1, gpu_mem_gb=141)
    assert p.fits and p.selective and p.checkpointed_blocks == p.layers
    assert p.total_gib == pytest.approx(measured_gib, rel=0.10), (p.total_gib, measured_gib)


def test_print_info_returns_the_numbers():
    console = Console(record=True, width=200)
    n = print_info("cosmos-predict2.5-2b", frames=93, height=432, width=768, plan=True, console=console)
    assert n["tokens"] == 31_104 and n["latent_shape"] == (16, 24, 54, 96)
    assert n["params"] / 1e9 == pytest.approx(2.06, abs=0.005) and n["lora_params"] / 1e6 == pytest.approx(45.9, abs=0.05)
    assert n["train_step_flops"] == 3 * n["forward_flops"]
    assert n["activation_bytes_full_ckpt"] < n["activation_bytes_no_ckpt"]
    assert n["plan"].fits
    out = console.export_text()
    assert "FLOPs per forward" in out and "fits" in out


def test_print_info_unknown_name_and_missing_dir():
    with pytest.raises(ModelError, match="unknown model 'nope'"):
        print_info("nope", console=Console(file=None, record=True))
    with pytest.raises(ModelError, match="does not exist"):
        print_info("./no/such/model", console=Console(record=True))


def test_print_info_reads_a_model_directory(tmp_path):
    (tmp_path / "transformer").mkdir()
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "Cosmos2_5_PredictBasePipeline"}))
    cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in get_spec("tiny-predict2.5").transformer.items()}
    (tmp_path / "transformer" / "config.json").write_text(json.dumps(cfg))
    n = print_info(str(tmp_path), frames=17, height=64, width=112, console=Console(record=True))
    assert n["params"] == count_transformer_params(cfg, get_spec("tiny-predict2.5").lora_targets, 32).total
    assert n["tokens"] == 5 * 4 * 7


def test_print_info_takes_a_hub_id_from_the_local_cache(tmp_path, monkeypatch):
    """`org/name` as model.path takes it: read from the local Hugging Face cache, nothing downloaded."""
    import huggingface_hub.constants as hub

    snap = tmp_path / "models--org--tiny" / "snapshots" / "abc123"
    (snap / "transformer").mkdir(parents=True)
    (snap / "model_index.json").write_text(json.dumps({"_class_name": "Cosmos2_5_PredictBasePipeline"}))
    cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in get_spec("tiny-predict2.5").transformer.items()}
    (snap / "transformer" / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "models--org--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path))
    n = print_info("org/tiny", frames=17, height=64, width=112, console=Console(record=True))
    assert n["tokens"] == 5 * 4 * 7
    with pytest.raises(ModelError, match="no snapshot of the hub model org/other"):
        print_info("org/other", console=Console(record=True))


def test_plan_of_a_mode_the_family_does_not_model_says_which():
    with pytest.raises(ModelError, match="models Cosmos 3 LoRA training only, not dora; use --mode lora"):
        print_info("tiny-cosmos3", plan=True, mode="dora", console=Console(record=True))
    n = print_info("tiny-cosmos3", plan=True, mode="lora", console=Console(record=True))
    assert n["plan"].mode == "lora"
