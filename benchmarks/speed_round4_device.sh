#!/usr/bin/env bash
# Speed, round 4 on one lent GPU in one call: every goal of the speed table, the plain path and worldtune on the same
# card, with float8 through torchao as a variant (benchmarks/speed_round4.py). Results are merged by goal into
# /tmp/speed-round4/speed_round4.json (a warm machine keeps it between calls, so a second call on the same card adds
# the goals a first one skipped) and copied, with the log, to $OUT.
#
# Carry .whl/ (benchmarks/device_env.sh's wheels) with torchao's wheel added, made where pip reaches PyPI:
#     pip download torchao==0.18.0 --no-deps -d .whl
# torchao 0.18.0 is built against torch 2.11, the lent machines' torch.
# fd_chunk also needs PyAV (serve's sampler imports the video module): carry .av (benchmarks/device_env.sh) in a
# call of its own on the same warm machine, before or after (the carry limit leaves no room for both at once).
#
#   bash benchmarks/speed_round4_device.sh                         # every goal, within BUDGET seconds (default 520);
#                                         fd_train (its target already met) last, so it is the one a tight budget skips
#   GOALS=lora,predict25 bash benchmarks/speed_round4_device.sh     # the goals a first call skipped, same warm card
#   EXTRA_ARGS="--variant fp8='--generate.fp8 true' --variant cache='--generate.cache...'" bash ...  # other variants
set -u
WORK=/tmp/speed-round4
OUT=${OUT:-$WORK}
mkdir -p "$OUT" "$WORK"
source "$(dirname "$0")/device_env.sh" || exit 1
if ! python3 -c "import torchao" 2>/dev/null; then  # a warm machine set up before torchao was carried
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/torchao-*.whl \
    || { echo "torchao's wheel is not in .whl/: pip download torchao==0.18.0 --no-deps -d .whl, and carry .whl"; exit 1; }
fi
python3 - <<'PY' || exit 1
import torch, torchao
cap = torch.cuda.get_device_capability(0)
print(f"torch {torch.__version__}, torchao {torchao.__version__}, {torch.cuda.get_device_name(0)} capability {cap}")
assert cap >= (8, 9), "float8 needs compute capability 8.9 or later"
PY
JSON="$WORK/speed_round4.json"
eval "set -- ${EXTRA_ARGS:-}"
python3 benchmarks/speed_round4.py --goals "${GOALS:-gen,fd_chunk,lora,predict25,fd_train}" \
  --budget-s "${BUDGET:-520}" --json "$JSON" "$@" 2>&1 | tee -a "$WORK/speed_round4.log"
status=${PIPESTATUS[0]}
[ "$OUT" != "$WORK" ] && cp "$JSON" "$WORK/speed_round4.log" "$OUT/" 2>/dev/null
exit "$status"
