#!/usr/bin/env bash
# The next seeds' first chunk on one lent GPU: seed-predict2.5's recipe up to its autoencoder and seed-cosmos3's
# whole recipe, side by side (benchmarks/seed_device.sh each); snapshots in $OUT/NAME.
#   call 1 (carry .av):  bash benchmarks/seed_next_device.sh install
#   call 2 (carry .whl): WAIT=560 BUDGET=1000 bash benchmarks/seed_next_device.sh
#   call 3 (carry .whl): WAIT=560 bash benchmarks/seed_next_device.sh      (snapshots again; the recipes go on)
set -u
source "$(dirname "$0")/device_env.sh" || exit 1
if [ "${1:-}" = install ]; then
  python3 -c "import av, torch; print('av', av.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(0))"
  exit
fi
NAME=seed-predict2.5 STOP_AFTER=autoencoder WAIT=1 BUDGET=${BUDGET:-1000} bash "$(dirname "$0")/seed_device.sh" \
  >"${OUT:-/tmp/seed-out}/predict25_call.log" 2>&1
NAME=seed-cosmos3 WAIT=${WAIT:-560} BUDGET=${BUDGET:-1000} bash "$(dirname "$0")/seed_device.sh"
NAME=seed-predict2.5 STOP_AFTER=autoencoder WAIT=0 BUDGET=${BUDGET:-1000} bash "$(dirname "$0")/seed_device.sh" >>"${OUT:-/tmp/seed-out}/predict25_call.log" 2>&1
tail -3 /tmp/seedwork-seed-predict2.5/seed.log
