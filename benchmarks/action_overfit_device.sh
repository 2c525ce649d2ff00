#!/usr/bin/env bash
# The forward-dynamics overfit check (benchmarks/action_overfit.py) on a lent GPU, in one call: the shipped
# seed-cosmos3 at two learning rates, and its VAE under a fresh transformer with latent patch 2 and 1, side by side
# on one GPU. Each run writes its JSON and log to $OUT.
#   STEPS=2000 EVERY=250 LIMIT=500 bash benchmarks/action_overfit_device.sh
set -u
source "$(dirname "$0")/device_env.sh" || exit 3
python3 -c "import av, cv2, pyarrow, torch, diffusers; print('av', av.__version__, 'cv2', cv2.__version__, 'pyarrow', pyarrow.__version__, 'torch', torch.__version__, 'diffusers', diffusers.__version__)" || exit 4
export OMP_NUM_THREADS=3
STEPS=${STEPS:-2000}; EVERY=${EVERY:-250}; LIMIT=${LIMIT:-500}
run() {  # name, extra arguments
  local name=$1; shift
  timeout "$LIMIT" python3 benchmarks/action_overfit.py --model seed-cosmos3 --steps "$STEPS" --score-every "$EVERY" \
    --work "/tmp/overfit_$name" --json "$OUT/overfit_$name.json" "$@" >"$OUT/overfit_$name.log" 2>&1
  echo "$name exit $?" >>"$OUT/overfit_$name.log"
}
run seed &
run seed_lr2e-3 --train.lr 2e-3 &
run fresh_lr1e-3 --fresh-transformer --train.lr 1e-3 &
run fresh_patch1_lr1e-3 --fresh-transformer --transformer '{"latent_patch_size": 1}' --train.lr 1e-3 &
wait
for f in "$OUT"/overfit_*.log; do echo "== $f"; grep -E "ratio|exit|Error" "$f" | tail -12; done
