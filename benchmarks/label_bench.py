"""IDM labelling throughput: videos/s of `ActionLabeler.label` (resize views + sliding windows + chunk averaging).

Two workloads (`--preset`):
- demo: 17-frame videos of three 32x56 views (the demo's 64x112 grid split), IDM at 32x56, 16 channels;
- droid: 93-frame videos of three 240x416 views (a 480x832 grid split), resized to an IDM input of
  120x208, 32 channels (a size a real run would pick).
The model is randomly initialised (throughput does not depend on the weights); frames are random
and already decoded (video decoding is measured in docs/benchmarks.md's data section). On CUDA the
device is synchronised before the clock stops.

    .venv/bin/python benchmarks/label_bench.py --device cpu --preset demo
    python benchmarks/label_bench.py --device cuda --preset droid
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

PRESETS = {
    "demo": {"frames": 17, "source": (32, 56), "idm": (32, 56), "channels": 16},
    "droid": {"frames": 93, "source": (240, 416), "idm": (120, 208), "channels": 32},
}
ROLES = ("exterior_1", "exterior_2", "wrist")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="demo")
    ap.add_argument("--videos", type=int, default=20)
    ap.add_argument("--horizon", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64, help="windows per forward pass")
    ap.add_argument("--out", default=None, help="also write the result as JSON here")
    args = ap.parse_args()

    from worldtune.idm.label import ActionLabeler
    from worldtune.idm.model import InverseDynamicsModel

    p = PRESETS[args.preset]
    device = torch.device(args.device)
    (h, w), (sh, sw) = p["idm"], p["source"]
    torch.manual_seed(0)
    model = InverseDynamicsModel(len(ROLES), args.horizon + 1, args.horizon, 4, p["channels"]).to(device).eval()
    meta = {"cameras": {r: r for r in ROLES}, "architecture": {"height": h, "width": w},
            "action_names": ["x", "y", "z", "gripper"], "resize": "pad"}
    labeler = ActionLabeler(model, meta, args.batch)
    rng = np.random.default_rng(0)
    videos = [{r: rng.integers(0, 256, (p["frames"], sh, sw, 3), dtype=np.uint8) for r in ROLES}
              for _ in range(min(args.videos, 4))]
    labeler.label(videos[0])  # warm-up (cuDNN autotune, allocator)
    sync(device)
    t0 = time.perf_counter()
    for i in range(args.videos):
        labeler.label(videos[i % len(videos)])
    sync(device)
    seconds = time.perf_counter() - t0
    result = {"preset": args.preset, **p, "horizon": args.horizon, "batch": args.batch, "videos": args.videos,
              "device": str(device), "seconds": round(seconds, 3), "videos_per_s": round(args.videos / seconds, 2),
              "frames_per_s": round(args.videos * p["frames"] / seconds, 1), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine(),
              "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None}
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
