#!/usr/bin/env bash
# One call of a transformer chunk of the next seeds on one lent GPU (benchmarks/seed_device.sh each; NAMES, default
# both, side by side), each going on from seedinit/NAME/: the finished autoencoder run (vae/) and the transformer to
# start from (transformer.safetensors[.xz]: the weights a chunk returned). seed-predict2.5's first chunk started from
# the shipped transformer (the same architecture; its new VAE is a fine-tune of the shipped one).
# The checkout's limit (64 MiB) takes .av (24 MB) or .whl (11 MB) beside a seedinit folder (10 and 18 MB) only where
# they fit, so the machine is filled call by call; what a call carried is kept there for the later ones:
#   call 1 (carry .av):                             bash benchmarks/seed_chunk_device.sh install
#   call 2 (carry .whl, seedinit/seed-predict2.5):  bash benchmarks/seed_chunk_device.sh install
#   call 3 (carry seedinit/seed-cosmos3):           WAIT=560 BUDGET=1300 bash benchmarks/seed_chunk_device.sh
#   call 4, ... (no carry):                         WAIT=560 bash benchmarks/seed_chunk_device.sh
# Side by side the recipes share the card: seed-predict2.5's step took 0.50 s beside seed-cosmos3 (0.17 s alone), so
# NAMES=seed-predict2.5 trains it about three times as fast. Each call leaves in $OUT, per seed: NAME-logs.tar.xz (log,
# curves, run.json, seed.json once packed) and the weights (NAME-ema_fp16.safetensors while training,
# NAME-transformer.safetensors and NAME-vae.safetensors once packed).
set -u
KEEP=/tmp/seedinit-keep  # outside the checkout: a warm machine keeps it between calls
read -ra NAMES <<<"${NAMES:-seed-predict2.5 seed-cosmos3}"  # the seeds to train
source "$(dirname "$0")/device_env.sh" || exit 1
mkdir -p "$KEEP"
for n in "${NAMES[@]}"; do  # what a call carried is kept; what it did not is restored
  if [ -d "seedinit/$n" ]; then cp -r "seedinit/$n" "$KEEP/"; elif [ -d "$KEEP/$n" ]; then
    mkdir -p seedinit && cp -r "$KEEP/$n" seedinit/; fi
done
P25=seedinit/seed-predict2.5
[ -d "$P25" ] && ! compgen -G "$P25/transformer.safetensors*" >/dev/null \
  && cp src/worldtune/seeds/seed-predict2.5/transformer.safetensors "$P25/" && cp -r "$P25" "$KEEP/"
if [ "${1:-}" = install ]; then
  python3 -c "import av, torch; print('av', av.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(0))"
  ls -R "$KEEP"
  exit
fi
rm -rf /tmp/seed-out  # each call's snapshot is made anew from the work folders
export OUT_BACK=$OUT OUT=/tmp/seed-out  # seed_device.sh's snapshots, packed into $OUT_BACK below
T0=$(date +%s)
for n in "${NAMES[@]}"; do  # start (or find running) each recipe
  NAME=$n WAIT=1 BUDGET=${BUDGET:-1300} bash "$(dirname "$0")/seed_device.sh" >>"/tmp/$n-calls.log" 2>&1
done
running() { for n in "${NAMES[@]}"; do pgrep -f "seed_device.sh detached $n" >/dev/null && return 0; done; return 1; }
while [ $(($(date +%s) - T0)) -lt "${WAIT:-560}" ] && running; do sleep 5; done
for n in "${NAMES[@]}"; do  # snapshot each
  NAME=$n WAIT=0 bash "$(dirname "$0")/seed_device.sh" >>"/tmp/$n-calls.log" 2>&1
  cp "/tmp/$n-calls.log" "/tmp/seed-out/$n/calls.log"
done
for n in "${NAMES[@]}"; do
  tar -C /tmp/seed-out -cJf "$OUT_BACK/$n-logs.tar.xz" --exclude='*.safetensors' "$n"
  for f in /tmp/seed-out/"$n"/*.safetensors; do [ -f "$f" ] && cp "$f" "$OUT_BACK/$n-$(basename "$f")"; done
  echo "== $n"; tail -4 "/tmp/seedwork-$n/seed.log"
done
ls -la "$OUT_BACK"
