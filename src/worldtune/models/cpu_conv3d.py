"""3-D convolutions on the CPU through oneDNN, whatever the batch size.

PyTorch picks a CPU convolution kernel by a rule written for images: a float convolution goes to oneDNN
(mkldnn) when the batch is above 1, the kernel above 3x3, or N*C*D*H above 20,480, and otherwise to
`slow_conv3d`, its reference kernel. The Wan VAE (Predict2.5's and Cosmos 3's autoencoder) runs causal
convolutions of 3x3x3 on 1 to 3 frames at a time, so with one clip in the batch almost every one of them
lands on the reference kernel: about 6 times slower than oneDNN on the same input, which made the VAE most of
a CPU generation's time. `route_conv3d_to_onednn` sends a module's `nn.Conv3d` layers to oneDNN directly
for float32 CPU inputs (the result differs from the reference kernel by float32 rounding only) and leaves
every other input (CUDA, bf16, padding modes other than zeros) on PyTorch's own path.

That rounding can move a worldtune video away from a plain diffusers pipeline's by a level here and there.
`WORLDTUNE_CPU_CONV3D=pytorch` in the environment leaves PyTorch's own choice in place (as plain diffusers does), for
a user who needs worldtune's frames to equal a plain pipeline's bit for bit.
"""

from __future__ import annotations

import os
import types

import torch
from torch import nn

from worldtune.errors import ConfigError

KERNEL_ENV = "WORLDTUNE_CPU_CONV3D"
KERNELS = ("onednn", "pytorch")


def cpu_conv3d_kernel() -> str:
    """`onednn` (the default) or `pytorch`, from `WORLDTUNE_CPU_CONV3D`; read at load time, so one process can load a
    VAE each way."""
    value = os.environ.get(KERNEL_ENV, "").strip().lower() or "onednn"
    if value not in KERNELS:
        raise ConfigError(f"{KERNEL_ENV}={value!r}: expected onednn (the default: fast CPU 3-D convolutions) or "
                          "pytorch (PyTorch's own kernel choice, as a plain diffusers pipeline makes); set one or "
                          "unset it")
    return value


def _conv_forward(self: nn.Conv3d, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    if (input.device.type == "cpu" and input.dtype == torch.float32 and self.padding_mode == "zeros"
            and not isinstance(self.padding, str) and torch.backends.mkldnn.enabled):
        return torch.mkldnn_convolution(input.contiguous(), weight.contiguous(), bias, self.padding, self.stride,
                                        self.dilation, self.groups)
    return nn.Conv3d._conv_forward(self, input, weight, bias)


def route_conv3d_to_onednn(module: nn.Module) -> nn.Module:
    """Every `nn.Conv3d` in `module` runs float32 CPU inputs through oneDNN (in place; returns `module`).

    A no-op where PyTorch was built without oneDNN, or with `WORLDTUNE_CPU_CONV3D=pytorch`."""
    if cpu_conv3d_kernel() == "pytorch" or not torch.backends.mkldnn.is_available():
        return module
    for m in module.modules():
        if isinstance(m, nn.Conv3d):
            m._conv_forward = types.MethodType(_conv_forward, m)
    return module
