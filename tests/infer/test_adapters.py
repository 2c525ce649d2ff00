"""Adapters are checked against the base model before anything is generated."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.infer.conftest import LORA_TARGETS, make_adapter
from worldtune.errors import GenerationError
from worldtune.infer.adapters import WEIGHTS, check_adapter


def test_exported_adapter_passes(tiny_pipe, adapter_dir):
    a = check_adapter(adapter_dir, tiny_pipe.transformer, "lora_a", 0.5)
    assert (a.rank, a.prefix, a.scale) == (4, "transformer", 0.5)
    targets = [n for n, m in tiny_pipe.transformer.named_modules()
               if isinstance(m, torch.nn.Linear) and n.endswith(tuple(LORA_TARGETS))]
    assert a.num_modules == len(targets) == 20  # 2 blocks x (self q,k,v,out + cross q,k,v,out + 2 ff)

def test_adapter_of_another_model_size_is_one_line_error(tmp_path, tiny_pipe):
    from worldtune.models.build import build_transformer
    from worldtune.models.registry import get_spec

    spec = get_spec("tiny-predict2.5")
    wider = dataclasses.replace(spec, transformer={**spec.transformer, "attention_head_dim": 24})
    other = make_adapter(build_transformer(wider), tmp_path / "wider")
    with pytest.raises(GenerationError, match=r"shape .* another model size") as e:
        check_adapter(other, tiny_pipe.transformer, "wider")
    assert "\n" not in str(e.value)


def test_adapter_keys_matching_no_module(tmp_path, tiny_pipe):
    from safetensors.torch import save_file

    (tmp_path / "foreign").mkdir()
    save_file({"transformer.blocks.0.attn.qkv.lora_A.weight": torch.zeros(4, 16),
               "transformer.blocks.0.attn.qkv.lora_B.weight": torch.zeros(48, 4)}, tmp_path / "foreign" / WEIGHTS)
    with pytest.raises(GenerationError, match="does not exist in this base model"):
        check_adapter(tmp_path / "foreign", tiny_pipe.transformer, "foreign")


def test_missing_adapter_file(tmp_path, tiny_pipe):
    with pytest.raises(GenerationError, match=WEIGHTS):
        check_adapter(tmp_path, tiny_pipe.transformer, "none")
