#!/usr/bin/env bash
# The world-model benchmark's full panel (benchmarks/world_model_policies_bench.py: 8 policies x 50 episodes in the
# scene's simulator and in seed-cosmos3 served by `worldtune serve`, 35 steps, guidance 6) on a lent GPU machine whose
# calls are capped at 10 minutes.
#
# The benchmark runs detached (setsid), so it goes on between calls while the machine stays warm; each call waits up
# to WAIT seconds (or until it ends) and leaves in $OUT the log so far and, once done, results.json, scatter.png and
# report.md. Call it again (same command) until the log says "benchmark exit".
#
# What the machine lacks comes carried:
#   .whl/*.whl        the wheels benchmarks/device_env.sh installs (diffusers, peft and the small ones);
#   .av/av.tar.xz     PyAV unpacked and xz-packed (the server records every rollout as a LeRobot episode, which needs
#                     it); 24 MB, so carry it in a call of its own first (`bash benchmarks/world_model_policies_device.sh
#                     install`): the warm machine keeps it;
#   .device/wmb       what the server reads of the prepared scene dataset, made on the CPU by
#                     `.venv/bin/python benchmarks/world_model_policies_bench.py --out /tmp/wmb --prepare-only .device/wmb`.
#
#   WAIT=560 bash benchmarks/world_model_policies_device.sh          (ARGS="--episodes 20" for other settings)
set -u
T0=$(date +%s)
WAIT=${WAIT:-560}
W=${W:-/tmp/wmb}  # outside the checkout: a warm machine keeps it between calls
OUT=${OUT:-/tmp/wmb-out}
DATA=${DATA:-.device/wmb}
read -ra EXTRA <<<"${ARGS:-}"  # (another name: an array cannot be exported to the detached run)
mkdir -p "$OUT" "$W" /tmp/site
if [ -f .av/av.tar.xz ] && [ ! -f /tmp/site/.av-ok ]; then
  tar -xJf .av/av.tar.xz -C /tmp/site && touch /tmp/site/.av-ok || exit 3
fi
[ "${1:-}" = install ] && { ls /tmp/site; exit 0; }
source "$(dirname "$0")/device_env.sh" || exit 3

if [ "${1:-}" = detached ]; then
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  python3 -c "import av, cv2, matplotlib, torch, diffusers; print('av', av.__version__, 'torch', torch.__version__, 'diffusers', diffusers.__version__)" || exit 4
  python3 benchmarks/world_model_policies_bench.py --out "$W/out" --dataset "$DATA" --device cuda \
    "${EXTRA[@]}" 2>&1
  echo "benchmark exit $?"
  exit
fi
if ! pgrep -f "world_model_policies_device.sh detached" >/dev/null && ! grep -q "benchmark exit" "$W/bench.log" 2>/dev/null; then
  [ -f "$DATA/info.json" ] || { echo "no $DATA/info.json: prepare it on the CPU (see the header) and carry .device"; exit 5; }
  setsid nohup bash "$0" detached >>"$W/bench.log" 2>&1 </dev/null &
  sleep 2
fi
while pgrep -f "world_model_policies_device.sh detached" >/dev/null && [ $(( $(date +%s) - T0 )) -lt "$WAIT" ]; do
  sleep 10
done
cp "$W/bench.log" "$OUT/" 2>/dev/null
for f in results.json scatter.png report.md; do cp "$W/out/$f" "$OUT/" 2>/dev/null; done
tail -40 "$W/bench.log"
