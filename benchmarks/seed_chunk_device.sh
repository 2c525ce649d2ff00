#!/usr/bin/env bash
# One call of a transformer chunk of both next seeds on one lent GPU, side by side (benchmarks/seed_device.sh each),
# each going on from seedinit/NAME/: the finished autoencoder run (vae/) and the transformer to start from
# (transformer.safetensors[.xz]: the EMA a chunk returned). seed-predict2.5's first chunk starts from the shipped
# transformer (the same architecture; its new VAE is a fine-tune of the shipped one). The checkout's limit (64 MiB)
# takes .whl or .av beside one seed's seedinit, not both, so the first call installs PyAV and keeps seed-predict2.5's:
#   call 1 (carry .av, seedinit/seed-predict2.5):  bash benchmarks/seed_chunk_device.sh install
#   call 2 (carry .whl, seedinit/seed-cosmos3):    WAIT=560 BUDGET=1300 bash benchmarks/seed_chunk_device.sh
#   call 3, ... (no carry):                        WAIT=560 bash benchmarks/seed_chunk_device.sh
# Each call leaves in $OUT, per seed: NAME-logs.tar.xz (log, curves, run.json, seed.json once packed) and the
# weights (NAME-ema_fp16.safetensors while training, NAME-transformer.safetensors and NAME-vae.safetensors once
# packed).
set -u
KEEP=/tmp/seedinit-keep  # outside the checkout: a warm machine keeps it between calls
NAMES=(seed-predict2.5 seed-cosmos3)
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
NAME=seed-predict2.5 WAIT=1 BUDGET=${BUDGET:-1300} bash "$(dirname "$0")/seed_device.sh" >/tmp/predict25_call.log 2>&1
NAME=seed-cosmos3 WAIT=${WAIT:-560} BUDGET=${BUDGET:-1300} bash "$(dirname "$0")/seed_device.sh"
NAME=seed-predict2.5 WAIT=0 BUDGET=${BUDGET:-1300} bash "$(dirname "$0")/seed_device.sh" >>/tmp/predict25_call.log 2>&1
cp /tmp/predict25_call.log /tmp/seed-out/seed-predict2.5/call.log
for n in "${NAMES[@]}"; do
  tar -C /tmp/seed-out -cJf "$OUT_BACK/$n-logs.tar.xz" --exclude='*.safetensors' "$n"
  for f in /tmp/seed-out/"$n"/*.safetensors; do [ -f "$f" ] && cp "$f" "$OUT_BACK/$n-$(basename "$f")"; done
  echo "== $n"; tail -4 "/tmp/seedwork-$n/seed.log"
done
ls -la "$OUT_BACK"
