"""`worldtune doctor`: is this machine able to run worldtune, and if not, what exactly to fix.

The check that matters most: every visible GPU's compute capability must be in the arch list
torch was compiled for. A missing one shows up at the first kernel as "no kernel image is
available for execution on the device", which reads like "this GPU is unsupported" and once cost
this workflow a day; the real fix is installing a torch build for that CUDA arch. Then attention
backends, library versions, video codecs and free disk. Each row is ok / warn / fail; the exit
code is 1 if anything failed.
"""

from __future__ import annotations

import importlib.metadata as md
import platform
import shutil
import sys
from dataclasses import dataclass
from typing import Literal

from rich.console import Console
from rich.table import Table

Status = Literal["ok", "warn", "fail"]

MINIMUMS = {"torch": "2.6", "torchvision": "0.21", "diffusers": "0.39", "transformers": "4.51", "peft": "0.15",
            "accelerate": "1.4", "av": "14.0"}
# compiled CUDA extensions that must also be built for the GPU's arch
EXTENSIONS = {"apex": "apex", "flash-attn": "flash_attn", "flash-attn-3": "flash_attn_interface",
              "transformer-engine": "transformer_engine", "xformers": "xformers", "sageattention": "sageattention"}
# (what it is for, codec name, "r" decode / "w" encode, required?)
CODECS = [("H.264 encode", "libx264", "w", True), ("H.264 decode", "h264", "r", True),
          ("AV1 encode (LeRobot default)", "libsvtav1", "w", False), ("AV1 decode", "libdav1d", "r", True),
          ("AV1 decode (fallback)", "libaom-av1", "r", False), ("VP9 encode", "libvpx-vp9", "w", False)]
DISK_WARN_GB, DISK_FAIL_GB = 50.0, 5.0


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _at_least(have: str, want: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(have.split("+")[0]) >= Version(want)
    except InvalidVersion:
        return True


def python_checks() -> list[Check]:
    ok = sys.version_info >= (3, 10)
    return [Check("Python", "ok" if ok else "fail", f"{platform.python_version()} ({sys.executable})"
                  + ("" if ok else ": worldtune needs Python >= 3.10"))]


def arch_supported(capability: tuple[int, int], arch_list: list[str]) -> bool:
    """True if torch ships SASS for this exact arch (sm_XY, sm_XYa) or PTX (compute_XY) it can JIT from."""
    major, minor = capability
    cc = major * 10 + minor
    for arch in arch_list:
        kind, _, num = arch.partition("_")
        digits = "".join(ch for ch in num if ch.isdigit())
        if not digits:
            continue
        if kind == "sm" and int(digits) == cc:
            return True
        if kind == "compute" and int(digits) <= cc:  # PTX runs on newer GPUs through the driver's JIT
            return True
    return False


def torch_checks() -> list[Check]:
    """torch and its CUDA build, then every visible GPU against the compiled arch list."""
    import torch

    cuda = torch.version.cuda
    checks = [Check("torch", "ok", f"{torch.__version__}, CUDA build {cuda or 'none (CPU-only)'}"
                    + (f", cuDNN {torch.backends.cudnn.version()}" if cuda and torch.backends.cudnn.is_available() else ""))]
    if not torch.cuda.is_available():
        checks.append(Check("GPU", "warn", "no CUDA GPU visible: training and generation run on CPU (tiny models only)"
                            + ("" if cuda else "; this torch is a CPU-only build")))
        return checks
    arch_list = list(torch.cuda.get_arch_list())
    for i in range(torch.cuda.device_count()):
        cap = tuple(torch.cuda.get_device_capability(i))
        sm = f"sm_{cap[0]}{cap[1]}"
        name = torch.cuda.get_device_name(i)
        if arch_supported(cap, arch_list):
            checks.append(Check(f"GPU {i}", "ok", f"{name}, {sm}, in torch's arch list"))
        else:
            checks.append(Check(f"GPU {i}", "fail",
                                f"{name} is {sm} but this torch was built for {', '.join(arch_list) or 'no arch'}: "
                                f"kernels fail with 'no kernel image is available' (the GPU is fine). Fix: install a "
                                f"torch build that includes {sm} (e.g. a newer CUDA wheel from download.pytorch.org)"))
    return checks


def extension_checks() -> list[Check]:
    """Compiled CUDA extensions: they need their own build for the GPU arch, like torch."""
    checks = []
    for dist, module in EXTENSIONS.items():
        version = _version(dist) or _version(module)
        if version is None:
            continue
        checks.append(Check(dist, "ok", f"{version} installed (compiled extension: if it raises 'no kernel image', "
                                        f"rebuild it for this GPU's arch)"))
    return checks


def attention_checks() -> list[Check]:
    """Which SDPA kernels torch may pick, and which diffusers attention backends are importable."""
    import torch

    if torch.cuda.is_available():
        flags = {"flash": torch.backends.cuda.flash_sdp_enabled(),
                 "mem-efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
                 "cuDNN": torch.backends.cuda.cudnn_sdp_enabled(), "math": torch.backends.cuda.math_sdp_enabled()}
        on = [k for k, v in flags.items() if v]
        sdpa = Check("SDPA backends", "ok" if set(on) - {"math"} else "warn", "enabled: " + ", ".join(on))
    else:
        sdpa = Check("SDPA backends", "ok", "CPU: flash-attention CPU kernel and math")
    checks = [sdpa]
    try:
        from diffusers.models.attention_dispatch import AttentionBackendName

        names = [b.value for b in AttentionBackendName]
        extra = [n for n in names if n.startswith(("flash", "_flash", "sage", "xformers"))]
        have = [n for n in extra if _backend_importable(n)]
        checks.append(Check("diffusers attention backends", "ok",
                            f"{len(names)} known; native always; extra importable: {', '.join(have) or 'none'}"))
    except ImportError:
        checks.append(Check("diffusers attention backends", "warn", "diffusers has no attention dispatcher"))
    return checks


def _backend_importable(name: str) -> bool:
    module = "sageattention" if "sage" in name else "xformers" if "xformers" in name else (
        "flash_attn_interface" if "3" in name else "flash_attn")
    return _version(module) is not None or _version(module.replace("_", "-")) is not None


def library_checks() -> list[Check]:
    checks = []
    for dist, minimum in MINIMUMS.items():
        have = _version(dist)
        if have is None:
            checks.append(Check(dist, "fail", f"not installed: pip install '{dist}>={minimum}'"))
        elif not _at_least(have, minimum):
            checks.append(Check(dist, "fail", f"{have} < {minimum}: pip install -U '{dist}>={minimum}'"))
        else:
            checks.append(Check(dist, "ok", f"{have} (>= {minimum})"))
    return checks


def codec_checks() -> list[Check]:
    """FFmpeg codecs PyAV was built with: datasets are AV1 or H.264, outputs are H.264."""
    try:
        import av
    except ImportError:
        return [Check("video codecs", "fail", "PyAV is not installed: pip install av")]
    checks = []
    for what, codec, mode, required in CODECS:
        try:
            av.codec.Codec(codec, mode)
            checks.append(Check(f"codec {codec}", "ok", what))
        except Exception:  # PyAV raises UnknownCodecError (or ValueError in older versions)
            checks.append(Check(f"codec {codec}", "fail" if required else "warn",
                                f"{what}: missing from this PyAV build (pip install -U av)"))
    return checks


def disk_checks(path: str = ".") -> list[Check]:
    free = shutil.disk_usage(path).free / 1e9
    status: Status = "fail" if free < DISK_FAIL_GB else "warn" if free < DISK_WARN_GB else "ok"
    return [Check("free disk", status, f"{free:.1f} GB free in {path} (latent caches and checkpoints need tens of GB)")]


def all_checks() -> list[Check]:
    return (python_checks() + torch_checks() + extension_checks() + attention_checks() + library_checks()
            + codec_checks() + disk_checks())


_STYLE = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]fail[/]"}


def run(console: Console | None = None) -> int:
    """Print every check as a table; 0 if nothing failed, 1 otherwise."""
    console = console or Console()
    checks = all_checks()
    table = Table(title="worldtune doctor")
    table.add_column("check")
    table.add_column("status")
    table.add_column("detail")
    for c in checks:
        table.add_row(c.name, _STYLE[c.status], c.detail)
    console.print(table)
    failed = [c.name for c in checks if c.status == "fail"]
    console.print(f"{len(checks)} checks, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
