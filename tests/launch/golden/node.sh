#!/bin/bash
# worldtune: run by srun once per node. Starts torchrun for this node's 8 GPU(s) and forwards
# preemption signals (USR1/TERM) to the training processes, never to torchrun itself.
set -u
PYTHON=<PYTHON>

PREEMPTED=0
TRAPPED=0
forward() { PREEMPTED=1; TRAPPED=1; [ -n "${TORCHRUN_PID:-}" ] && pkill -USR1 -P "$TORCHRUN_PID" 2>/dev/null; }
trap forward USR1 TERM

# torchrun ignores USR1 (its children inherit that until the trainer installs its own handler), so a
# signal sent to every process of the step cannot kill it. Rendezvous: c10d on the first node.
( trap '' USR1; exec "$PYTHON" -m torch.distributed.run \
    --nnodes "$SLURM_NNODES" --nproc-per-node 8 --max-restarts 0 \
    --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "$SLURM_JOB_ID" \
    -m worldtune.cli train <TMP>/job/config.toml --train.steps 10 --train.lr 1e-4 --train.resume auto ) &
TORCHRUN_PID=$!

while :; do
  TRAPPED=0
  wait "$TORCHRUN_PID"; RC=$?
  if [ "$TRAPPED" = 1 ]; then
    if kill -0 "$TORCHRUN_PID" 2>/dev/null; then continue; fi
    wait "$TORCHRUN_PID"; AGAIN=$?; if [ "$AGAIN" != 127 ]; then RC=$AGAIN; fi
  fi
  break
done
# torchrun reports a worker's exit 42 as its own failure (1): say "requeue me" when we were signalled.
if [ "$RC" -ne 0 ] && [ "$PREEMPTED" = 1 ]; then exit 42; fi
exit "$RC"
