#!/usr/bin/env bash
# The forward-dynamics overfit check (benchmarks/action_overfit.py) on a lent GPU, in one call: the shipped
# seed-cosmos3 at two learning rates, and its VAE under a fresh transformer with latent patch 2 and 1, side by side
# on one GPU. Each run writes its JSON and log to $OUT. The clips may come prepared in $DATA (carry .device), made on
# the CPU by benchmarks/action_overfit.py --work DIR --steps 1 (DIR/dataset), so the machine needs no PyAV.
#   STEPS=2000 EVERY=250 LIMIT=500 bash benchmarks/action_overfit_device.sh
set -u
source "$(dirname "$0")/device_env.sh" || exit 3
python3 -c "import cv2, pyarrow, torch, diffusers, transformers; print('cv2', cv2.__version__, 'pyarrow', pyarrow.__version__, 'torch', torch.__version__, 'diffusers', diffusers.__version__, 'transformers', transformers.__version__)" || exit 4
export OMP_NUM_THREADS=3
STEPS=${STEPS:-2000}; EVERY=${EVERY:-250}; LIMIT=${LIMIT:-500}
DATA=${DATA:-.device/overfit/dataset}  # the check's clips prepared and cached on the CPU (writing them needs PyAV)
run() {  # name, extra arguments
  local name=$1; shift
  mkdir -p "/tmp/overfit_$name" && [ -d "$DATA" ] && cp -r "$DATA" "/tmp/overfit_$name/dataset"
  timeout "$LIMIT" python3 benchmarks/action_overfit.py --model seed-cosmos3 --steps "$STEPS" --score-every "$EVERY" \
    --work "/tmp/overfit_$name" --json "$OUT/overfit_$name.json" "$@" >"$OUT/overfit_$name.log" 2>&1
  echo "$name exit $?" >>"$OUT/overfit_$name.log"
}
run seed &
run seed_lr2e-3 --train.lr 2e-3 &
run fresh_lr1e-3 --fresh-transformer --train.lr 1e-3 &
run fresh_patch1_lr1e-3 --fresh-transformer --transformer '{"latent_patch_size": 1}' --train.lr 1e-3 &
wait
for f in "$OUT"/overfit_*.log; do echo "== $f"; grep -E "overfit check|ratio|exit|Error" "$f" | tail -12; done
