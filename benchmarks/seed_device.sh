#!/usr/bin/env bash
# One call of a seed model's recipe on a lent GPU machine whose calls are capped at 10 minutes.
#
# The recipe (`worldtune seed NAME`) runs detached (setsid), so it keeps training between calls while the machine
# stays warm; each call waits up to WAIT seconds (or until the recipe ends) and leaves a snapshot in $OUT: the
# log, the transformer's curves, and the weights (the packed seed once done, else the newest checkpoint's EMA as
# fp16, which a fresh machine can start from: put it in seedinit/transformer.safetensors and carry seedinit).
# The lending machine takes 64 MiB of files with the checkout: seedinit/*.safetensors.xz are unpacked first (the
# seed's shipped weights, xz-compressed, when the checkout leaves them out: transformer.safetensors.xz to start
# from, vae.safetensors.xz the seed's VAE).
#
#   WAIT=560 BUDGET=1450 bash benchmarks/seed_device.sh      (NAME defaults to seed-cosmos3)
#
# Recipes of two seeds may run side by side (NAME=seed-predict2.5 ... & NAME=seed-cosmos3 ...): each has its own
# work folder, detached process and snapshot folder $OUT/NAME. STOP_AFTER=autoencoder ends a recipe after that step.
# With REUSE_VAE=1 a finished autoencoder is taken from benchmarks/results/NAME/ (run.json, curves,
# vae/config.json) with the seed's shipped VAE weights (or seedinit's), instead of training one.
# The snapshot also holds vae/: the newest VAE of this run (fp16, with its config, run.json and curves).
set -u
T0=$(date +%s)
NAME=${NAME:-seed-cosmos3}
read -ra EXTRA <<<"${EXTRA_ARGS:-}"  # more --section.key VALUE overrides of the recipe
W=${W:-/tmp/seedwork-$NAME}  # outside the checkout: a warm machine keeps it between calls
OUT=${OUT:-/tmp/seed-out}/$NAME
STOP=()
[ -n "${STOP_AFTER:-}" ] && STOP=(--stop-after "$STOP_AFTER")
mkdir -p "$OUT" "$W"
source "$(dirname "$0")/device_env.sh" || exit 1
[ -f seedinit/vae.safetensors.xz ] && mkdir -p "src/worldtune/seeds/$NAME" \
  && xz -dc seedinit/vae.safetensors.xz >"src/worldtune/seeds/$NAME/vae.safetensors"
[ -f seedinit/transformer.safetensors.xz ] && xz -dc seedinit/transformer.safetensors.xz >seedinit/transformer.safetensors
# seedinit/NAME/ (this recipe's own state from an earlier session, what the snapshots return): vae/ a finished
# autoencoder run (config.json, run.json, metrics.jsonl, vae.safetensors or .xz), transformer.safetensors[.xz] the
# transformer's weights to go on from (the packed seed's or the EMA snapshot)
INIT=seedinit/$NAME
[ -f "$INIT/transformer.safetensors.xz" ] && xz -dc "$INIT/transformer.safetensors.xz" >"$INIT/transformer.safetensors"
TINIT=seedinit/transformer.safetensors
[ -f "$INIT/transformer.safetensors" ] && TINIT=$INIT/transformer.safetensors

recipe() {  # the detached part
  local args=(seed "$NAME" --out "$W" --ship "$W/ship" --budget-s "$BUDGET" --train.checkpoint.every 250
              --autoencoder.checkpoint_every 250 "${STOP[@]}" "${EXTRA[@]}")
  if [ -f "$TINIT" ] && [ ! -d "$W/runs/transformer" ]; then
    python3 -m worldtune.cli seed "$NAME" --out "$W" --stop-after model || return
    python3 - "$W/model/transformer" "$TINIT" <<'EOF'
import sys, torch
from pathlib import Path
from safetensors.torch import load_file, save_file
folder, init = Path(sys.argv[1]), load_file(sys.argv[2])
(target,) = folder.glob("*.safetensors")
state = load_file(str(target))
assert set(init) <= set(state), sorted(set(init) - set(state))[:5]
state.update({k: v.to(state[k].dtype) for k, v in init.items()})
save_file(state, str(target))
print(f"transformer: {len(init)} tensors from seedinit (a fresh optimizer and schedule)")
EOF
  fi
  python3 -m worldtune.cli "${args[@]}"
  echo "recipe exit $?"
}

if [ "${1:-}" = detached ]; then recipe; exit; fi
running() { pgrep -f "seed_device.sh detached $NAME" >/dev/null; }
if ! running && [ ! -f "$W/ship/seed.json" ]; then
  if [ ! -f "$W/runs/vae/run.json" ] && [ -f "$INIT/vae/run.json" ]; then
    mkdir -p "$W/runs/vae/vae"
    cp "$INIT/vae/config.json" "$W/runs/vae/vae/"
    if [ -f "$INIT/vae/vae.safetensors.xz" ]; then
      xz -dc "$INIT/vae/vae.safetensors.xz" >"$W/runs/vae/vae/diffusion_pytorch_model.safetensors"
    else
      cp "$INIT/vae/vae.safetensors" "$W/runs/vae/vae/diffusion_pytorch_model.safetensors"
    fi
    cp "$INIT/vae/run.json" "$INIT/vae/metrics.jsonl" "$W/runs/vae/"
    echo "autoencoder: the finished run in $INIT/vae"
  fi
  if [ "${REUSE_VAE:-0}" = 1 ] && [ ! -f "$W/runs/vae/run.json" ] && [ -f "benchmarks/results/$NAME/run.json" ] \
      && [ -f "src/worldtune/seeds/$NAME/vae.safetensors" ]; then
    mkdir -p "$W/runs/vae"
    cp -r "benchmarks/results/$NAME/vae" "$W/runs/vae/vae"  # config.json; the weights are the seed's
    cp "src/worldtune/seeds/$NAME/vae.safetensors" "$W/runs/vae/vae/diffusion_pytorch_model.safetensors"
    cp "benchmarks/results/$NAME/run.json" "$W/runs/vae/run.json"
    cp "benchmarks/results/$NAME/vae_metrics.jsonl" "$W/runs/vae/metrics.jsonl"
  fi
  BUDGET=$BUDGET setsid nohup bash "$0" detached "$NAME" >>"$W/seed.log" 2>&1 </dev/null &
  sleep 2
fi
while [ $(($(date +%s) - T0)) -lt "$WAIT" ] && running; do sleep 5; done

# snapshot
cp "$W/seed.log" "$OUT/seed.log"
[ -f "$W/runs/transformer/metrics.jsonl" ] && cp "$W/runs/transformer/metrics.jsonl" "$OUT/dit_metrics.jsonl"
[ -f "$W/runs/transformer/run.json" ] && cp "$W/runs/transformer/run.json" "$OUT/dit_run.json"
python3 - "$W/runs/vae" "$OUT/vae" <<'EOF'
import shutil, sys, torch
from pathlib import Path
from safetensors.torch import load_file, save_file
run, out = Path(sys.argv[1]), Path(sys.argv[2])
done = run / "vae" / "diffusion_pytorch_model.safetensors"
ckpts = sorted((p for p in (run / "checkpoints").glob("step-*") if p.is_dir()), key=lambda p: int(p.name[5:]))
weights = done if done.is_file() else next((f for c in reversed(ckpts) for f in sorted(c.glob("*.safetensors"))
                                             if "optim" not in f.name), None)
if weights is not None:
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.to(torch.float16).contiguous() for k, v in load_file(str(weights)).items()},
              str(out / "vae.safetensors"))
    for name in ("run.json", "metrics.jsonl"):
        if (run / name).is_file():
            shutil.copy(run / name, out / name)
    if (run / "vae" / "config.json").is_file():
        shutil.copy(run / "vae" / "config.json", out / "config.json")
    print(f"snapshot: VAE from {weights.relative_to(run)}")
EOF
if [ -f "$W/ship/seed.json" ]; then
  cp "$W/ship/seed.json" "$W/ship/transformer.safetensors" "$OUT/"
  cmp -s "$W/ship/vae.safetensors" "src/worldtune/seeds/$NAME/vae.safetensors" || cp "$W/ship/vae.safetensors" "$OUT/"
else
  python3 - "$W/runs/transformer/checkpoints" "$OUT/ema_fp16.safetensors" <<'EOF'
import sys, torch
from pathlib import Path
from safetensors.torch import load_file, save_file
done = sorted(p for p in Path(sys.argv[1]).glob("step-*") if (p / "ema.safetensors").is_file())
if done:
    save_file({k: v.to(torch.float16).contiguous() for k, v in load_file(str(done[-1] / "ema.safetensors")).items()},
              sys.argv[2])
    print(f"snapshot: EMA of {done[-1].name}")
EOF
fi
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
tail -5 "$W/seed.log"
echo "call took $(($(date +%s) - T0)) s"
