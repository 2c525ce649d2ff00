#!/usr/bin/env bash
# The seed models' VAE decoders trained further on a lent GPU (one call of at most 10 minutes), encoders frozen.
#
# Why: the transformer of a seed model learned on its VAE's latents, so a new encoder would mean a new transformer.
# `worldtune autoencoder --autoencoder.train_part decoder` keeps the encoder and its latent statistics bit for bit
# and trains only the decoder: every latent stays what it was, the decode gets sharper. The two seeds' decoders
# train side by side on one prepared dataset of the scene (seed-cosmos3's recipe: paths drawn per episode), each
# measured first as shipped (the same held-out clips), then every VAL steps. HELD_OUT > 0 adds that many episodes of
# the seed's held-out tasks to the decoders' data (benchmarks/seed_decoder_data.py says why; the transformer never
# sees them); the data then follow the first seed's recipe (EPISODES pre-training episodes).
#
# The checkout leaves the shipped weights out (64 MiB a call): seedinit/NAME-vae.safetensors.xz carries each
# seed's VAE (xz -9e). $OUT receives, per seed (7 files in all, within what a call brings back): metrics.jsonl,
# baseline.json and the trained VAE as fp16 safetensors (or the newest checkpoint's, if the time ran out first); each
# run's log ends the call's output.
#
# FRAMES is the training windows' length: 17, the clips' own, trains the causal cache of every chunk the demo decodes
# (windows of 9 left the last two chunks of 17-frame clips several dB below the first).
#
#   WAIT=540 STEPS=1500 BATCH=24 LR=3e-4 FRAMES=17 bash benchmarks/seed_decoder_device.sh
#   SEEDS=seed-predict2.5 HELD_OUT=100 EPISODES=200 WAIT=540 STEPS=1500 BATCH=16 LR=3e-4 VAL=250 FRAMES=17 \
#     bash benchmarks/seed_decoder_device.sh
set -u
T0=$(date +%s)
WAIT=${WAIT:-540}; STEPS=${STEPS:-1500}; BATCH=${BATCH:-24}; LR=${LR:-3e-4}; VAL=${VAL:-250}; FRAMES=${FRAMES:-17}
W=${W:-/tmp/decoderwork}
OUT=${OUT:-/tmp/decoder-out}
read -r -a SEEDS <<<"${SEEDS:-seed-predict2.5 seed-cosmos3}"
HELD_OUT=${HELD_OUT:-0}; EPISODES=${EPISODES:-200}
mkdir -p "$OUT" "$W"
source "$(dirname "$0")/device_env.sh" || exit 1

# one dataset of the scene for every decoder: data and prepare of seed-cosmos3's recipe, or with HELD_OUT episodes
# of the held-out tasks added, of the first seed's
if [ "$HELD_OUT" -gt 0 ]; then
  python3 benchmarks/seed_decoder_data.py "${SEEDS[0]}" --out "$W/data" --episodes "$EPISODES" \
    --held-out "$HELD_OUT" >"$OUT/data.log" 2>&1
else
  python3 -m worldtune.cli seed seed-cosmos3 --out "$W/data" --stop-after prepare >"$OUT/data.log" 2>&1
fi || { tail -20 "$OUT/data.log"; exit 1; }
tail -1 "$OUT/data.log"
echo "data and prepare: $(($(date +%s) - T0)) s"

for NAME in "${SEEDS[@]}"; do
  mkdir -p "$W/$NAME"
  xz -dc "seedinit/$NAME-vae.safetensors.xz" >"$W/$NAME/shipped.safetensors"
  python3 - "$NAME" "$W/$NAME" "$W/data/dataset" <<'EOF'
import json, sys
from pathlib import Path
import torch
from safetensors.torch import load_file
from worldtune.models.build import build_vae
from worldtune.models.registry import get_spec
from worldtune.models.seeds import SEEDS_DIR
from worldtune.train.autoencoder import load_clips, round_trip_psnr

name, work, dataset = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
vae = build_vae(get_spec(name))
vae.load_state_dict({k: v.float() for k, v in load_file(str(work / "shipped.safetensors")).items()})
vae.register_to_config(**json.loads((SEEDS_DIR / name / "seed.json").read_text())["vae_config"])
vae.save_pretrained(work / "base" / "vae", safe_serialization=True)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
vae = vae.to(device).eval()
with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
    val = round_trip_psnr(vae, load_clips(dataset, "val", 8), device)
psnr, chunks = val["val_psnr"], val["val_psnr_chunks"]
(work / "baseline.json").write_text(json.dumps({"seed": name, "held_out_psnr_db": round(psnr, 3),
                                                "chunk_psnr_db": chunks, "val_clips": 8}))
print(f"{name}: shipped VAE, held-out round trip {psnr:.3f} dB, per latent frame {chunks}")
EOF
  setsid nohup python3 -m worldtune.cli autoencoder --model.path "$W/$NAME/base" \
    --autoencoder.dataset "$W/data/dataset" --autoencoder.out "$W/$NAME/run" --autoencoder.train_part decoder \
    --autoencoder.steps "$STEPS" --autoencoder.batch_size "$BATCH" --autoencoder.frames "$FRAMES" --autoencoder.lr "$LR" \
    --autoencoder.warmup 50 --autoencoder.val_every "$VAL" --autoencoder.val_clips 8 --autoencoder.log_every 50 \
    --autoencoder.checkpoint_every "$VAL" >"$W/$NAME/train.log" 2>&1 </dev/null &
done
sleep 5
while [ $(($(date +%s) - T0)) -lt "$WAIT" ] && pgrep -f "[w]orldtune.cli autoencoder" >/dev/null; do sleep 5; done
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader

for NAME in "${SEEDS[@]}"; do
  mkdir -p "$OUT/$NAME"
  cp "$W/$NAME/baseline.json" "$OUT/$NAME/" 2>/dev/null
  cp "$W/$NAME/run/metrics.jsonl" "$OUT/$NAME/" 2>/dev/null
  python3 - "$W/$NAME/run" "$OUT/$NAME" <<'EOF'
import sys
from pathlib import Path
import torch
from safetensors.torch import load_file, save_file
run, out = Path(sys.argv[1]), Path(sys.argv[2])
source = run / "vae" / "diffusion_pytorch_model.safetensors"
if not source.is_file():
    done = sorted(p for p in (run / "checkpoints").glob("step-*") if (p / "trainable.safetensors").is_file())
    if not done:
        sys.exit(f"{run}: nothing to snapshot")
    source = done[-1] / "trainable.safetensors"
save_file({k: v.to(torch.float16).contiguous() for k, v in load_file(str(source)).items()}, str(out / "vae.safetensors"))
print(f"snapshot {out.name}: {source}")
EOF
  tail -3 "$W/$NAME/train.log"
done
echo "call took $(($(date +%s) - T0)) s"
