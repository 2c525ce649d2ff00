"""`worldtune launch slurm`: an sbatch job that trains on N nodes and requeues itself on preemption.

The job folder (`--out`) holds everything a job needs and everything it leaves:

    job.sbatch           the batch script (submit it with `sbatch job.sbatch`)
    node.sh              run once per node by srun: starts torchrun, forwards USR1 to the trainers
    config.toml          a copy of the config, so editing the original cannot change a requeued job
    launch.json          how the script was made (config, overrides, resources), format worldtune.launch
    attempts             the number of times the batch script has started (names the logs)
    requeues-<jobid>     how many times this job requeued itself
    logs/attempt-<k>.log the output of every node for attempt k (lines labelled by node)
    logs/slurm-<jobid>.out  the batch script's own messages

Requeue protocol: SLURM sends USR1 to the batch shell `SIGNAL_LEAD_S` seconds before the time
limit; the shell forwards it to srun, which forwards it to node.sh on every node, which forwards it
to the training processes (never to torchrun, which would tear the workers down). The trainer
checkpoints at the next step boundary and exits with REQUEUE_EXIT_CODE (42). The batch shell then
runs `scontrol requeue $SLURM_JOB_ID` unless the job has already been requeued `--max-retries`
times; the requeued job starts again with `--train.resume auto` and continues from the checkpoint.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from worldtune.atomic import atomic_write_json, atomic_write_text
from worldtune.errors import LaunchError

SIGNAL_LEAD_S = 120  # USR1 this many seconds before the time limit: time to finish a step and save
REQUEUE_EXIT_CODE = 42  # the trainer's "checkpoint saved, requeue me" (worldtune.train.trainer)
CPUS_PER_GPU = 8  # cpus-per-task = this x GPUs per node; edit the script if your nodes differ

# Placeholders are {{NAME}}; everything else is bash, copied as is.
SBATCH_TEMPLATE = """#!/bin/bash
# worldtune training job, written by `worldtune launch slurm`. Submit: sbatch {{OUT}}/job.sbatch
#
# Resources. USR1 reaches this batch shell (B:) {{LEAD}} s before the time limit; --requeue lets
# the job requeue itself; --open-mode=append keeps the output of earlier attempts.
#SBATCH --job-name={{JOB_NAME}}
#SBATCH --nodes={{NODES}}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={{GPUS}}
#SBATCH --cpus-per-task={{CPUS}}
#SBATCH --time={{TIME}}
{{OPTIONAL}}#SBATCH --signal=B:USR1@{{LEAD}}
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output={{OUT}}/logs/slurm-%j.out
#SBATCH --chdir={{WORKDIR}}
set -u

# OUT: this job folder (scripts, config copy, counters, logs). RUN_DIR: train.out (checkpoints,
# metrics.jsonl, run.json). MAX_RETRIES: requeues allowed after preemption.
OUT={{OUT}}
RUN_DIR={{RUN_DIR}}
MAX_RETRIES={{MAX_RETRIES}}
REQUEUE_EXIT_CODE={{REQUEUE_CODE}}
mkdir -p "$OUT/logs"

# Attempt number (names the log) and requeues so far: SLURM's own restart count, or our counter
# file if that is larger (it survives a restart count that a site does not export).
ATTEMPT=$(( $(cat "$OUT/attempts" 2>/dev/null || echo 0) + 1 ))
echo "$ATTEMPT" > "$OUT/attempts"
LOG="$OUT/logs/attempt-$ATTEMPT.log"
REQUEUES=${SLURM_RESTART_COUNT:-0}
COUNTED=$(cat "$OUT/requeues-$SLURM_JOB_ID" 2>/dev/null || echo 0)
if [ "$COUNTED" -gt "$REQUEUES" ]; then REQUEUES=$COUNTED; fi

# Rendezvous: the first node of the allocation hosts the c10d store.
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 20000 ))
# NVLink multicast off (NVLS in NCCL, multicast in torch symmetric memory): harmless elsewhere.
export NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PYTHONUNBUFFERED=1

echo "worldtune: job $SLURM_JOB_ID attempt $ATTEMPT (requeues so far $REQUEUES of $MAX_RETRIES)" \\
     "on $SLURM_JOB_NUM_NODES node(s), master $MASTER_ADDR:$MASTER_PORT, log $LOG"

# Preemption: forward USR1/TERM to srun, which passes it to node.sh on every node.
SIGNALLED=0
TRAPPED=0
forward() { SIGNALLED=1; TRAPPED=1; echo "worldtune: preemption signal, forwarding to the trainers"; \\
            [ -n "${SRUN_PID:-}" ] && kill -USR1 "$SRUN_PID" 2>/dev/null; }
trap forward USR1 TERM

touch "$OUT/.attempt-start"
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" \\
     --kill-on-bad-exit=1 --label bash "$OUT/node.sh" >> "$LOG" 2>&1 &
SRUN_PID=$!

# `wait` returns early when a trapped signal arrives: wait again until srun has really exited.
while :; do
  TRAPPED=0
  wait "$SRUN_PID"; RC=$?
  if [ "$TRAPPED" = 1 ]; then
    if kill -0 "$SRUN_PID" 2>/dev/null; then continue; fi
    wait "$SRUN_PID"; AGAIN=$?; if [ "$AGAIN" != 127 ]; then RC=$AGAIN; fi
  fi
  break
done

# Preempted: the trainer said so (exit code 42, or a run.json not older than this attempt), or we
# were signalled and training did not finish.
PREEMPTED=0
if [ "$RC" -eq "$REQUEUE_EXIT_CODE" ]; then PREEMPTED=1; fi
if [ "$RC" -ne 0 ] && [ "$SIGNALLED" = 1 ]; then PREEMPTED=1; fi
if [ -f "$RUN_DIR/run.json" ] && ! [ "$OUT/.attempt-start" -nt "$RUN_DIR/run.json" ] \\
   && grep -q '"status": "preempted"' "$RUN_DIR/run.json"; then PREEMPTED=1; fi

if [ "$PREEMPTED" = 1 ]; then
  if [ "$REQUEUES" -lt "$MAX_RETRIES" ]; then
    echo $(( COUNTED + 1 )) > "$OUT/requeues-$SLURM_JOB_ID"
    echo "worldtune: attempt $ATTEMPT preempted (exit $RC): requeue $(( REQUEUES + 1 )) of $MAX_RETRIES"
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
  fi
  echo "worldtune: attempt $ATTEMPT preempted but $MAX_RETRIES requeues are used up:" \\
       "resubmit $OUT/job.sbatch to continue from the last checkpoint"
  exit "$REQUEUE_EXIT_CODE"
fi
echo "worldtune: attempt $ATTEMPT ended with exit code $RC (log $LOG)"
exit "$RC"
"""

NODE_TEMPLATE = """#!/bin/bash
# worldtune: run by srun once per node. Starts torchrun for this node's {{GPUS}} GPU(s) and forwards
# preemption signals (USR1/TERM) to the training processes, never to torchrun itself.
set -u
PYTHON={{PYTHON}}

PREEMPTED=0
TRAPPED=0
forward() { PREEMPTED=1; TRAPPED=1; [ -n "${TORCHRUN_PID:-}" ] && pkill -USR1 -P "$TORCHRUN_PID" 2>/dev/null; }
trap forward USR1 TERM

# torchrun ignores USR1 (its children inherit that until the trainer installs its own handler), so a
# signal sent to every process of the step cannot kill it. Rendezvous: c10d on the first node.
( trap '' USR1; exec "$PYTHON" -m torch.distributed.run \\
    --nnodes "$SLURM_NNODES" --nproc-per-node {{GPUS}} --max-restarts 0 \\
    --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "$SLURM_JOB_ID" \\
    -m worldtune.cli train {{TRAIN_ARGS}} ) &
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
if [ "$RC" -ne 0 ] && [ "$PREEMPTED" = 1 ]; then exit {{REQUEUE_CODE}}; fi
exit "$RC"
"""


def _fill(template: str, values: dict[str, str]) -> str:
    out = template
    for key, value in values.items():
        out = out.replace("{{" + key + "}}", value)
    if "{{" in out:
        raise AssertionError(f"unfilled placeholder in launch template: {out[out.index('{{'):][:40]}")
    return out


def train_args(config: Path, overrides: list[str]) -> list[str]:
    """Arguments of `worldtune train`: the config, the user's overrides, then always resume auto."""
    return [str(config), *overrides, "--train.resume", "auto"]


def render(config: Path, overrides: list[str], run_dir: Path, out: Path, *, nodes: int, gpus_per_node: int,
           time: str, partition: str | None = None, qos: str | None = None, account: str | None = None,
           max_retries: int = 5, workdir: Path | None = None, python: str | None = None,
           lead_s: int = SIGNAL_LEAD_S, job_name: str | None = None) -> dict[str, str]:
    """The two scripts as text: {"job.sbatch": ..., "node.sh": ...}. Paths should be absolute."""
    optional = "".join(f"#SBATCH --{k}={v}\n" for k, v in (("partition", partition), ("qos", qos),
                                                            ("account", account)) if v)
    values = {"OUT": shlex.quote(str(out)), "RUN_DIR": shlex.quote(str(run_dir)), "NODES": str(nodes),
              "GPUS": str(gpus_per_node), "CPUS": str(CPUS_PER_GPU * gpus_per_node), "TIME": time,
              "OPTIONAL": optional, "LEAD": str(lead_s), "MAX_RETRIES": str(max_retries),
              "REQUEUE_CODE": str(REQUEUE_EXIT_CODE), "JOB_NAME": (job_name or f"wt-{config.stem}")[:64],
              "WORKDIR": shlex.quote(str(workdir or Path.cwd())), "PYTHON": shlex.quote(python or sys.executable),
              "TRAIN_ARGS": shlex.join(train_args(config, overrides))}
    return {"job.sbatch": _fill(SBATCH_TEMPLATE, values), "node.sh": _fill(NODE_TEMPLATE, values)}


def _check(nodes: int, gpus_per_node: int, max_retries: int, time: str) -> None:
    if nodes < 1 or gpus_per_node < 1:
        raise LaunchError(f"--nodes {nodes} --gpus-per-node {gpus_per_node}: both must be at least 1")
    if max_retries < 0:
        raise LaunchError(f"--max-retries {max_retries}: must be 0 or more")
    if not time or any(c.isspace() for c in time):
        raise LaunchError(f"--time {time!r}: use SLURM's format, e.g. 48:00:00 or 2-00:00:00")


def check_inputs(cfg) -> None:
    """The model and the dataset a job will read exist (checked on the login node; the job's working
    directory is this one, so relative paths mean the same there)."""
    from worldtune.models.load import check_model_dir, local_model_path, resolve_spec

    m = cfg.model
    if m.path is not None:
        check_model_dir(local_model_path(m.path, m.revision))
    elif not (m.name and Path(m.name).is_dir()) and not resolve_spec(m.name).tiny and not m.random_weights:
        raise LaunchError(f"model.name={m.name} is a real-size model and model.path is not set: set model.path to its "
                          f"local diffusers folder (or model.random_weights = true for random weights)")
    if not (Path(cfg.train.dataset) / "info.json").is_file():
        raise LaunchError(f"train.dataset={cfg.train.dataset}: no prepared dataset there (no info.json); run "
                          f"`worldtune prepare` (and `worldtune cache`) before submitting")


def write_job(config: str | Path, overrides: list[str], out: str | Path, *, nodes: int = 1, gpus_per_node: int = 8,
              partition: str | None = None, qos: str | None = None, time: str = "48:00:00",
              account: str | None = None, max_retries: int = 5) -> Path:
    """Validate the config with its overrides, copy it into `out`, and write the scripts. Returns job.sbatch."""
    from worldtune.config import load_config

    _check(nodes, gpus_per_node, max_retries, time)
    source = Path(config).resolve()
    cfg = load_config(source, overrides)  # fail here, on the login node, not after hours in the queue
    check_inputs(cfg)
    out = Path(out).resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    copy = out / "config.toml"
    if source != copy:
        shutil.copyfile(source, copy)
    run_dir = Path(cfg.train.out).resolve()
    scripts = render(copy, overrides, run_dir, out, nodes=nodes, gpus_per_node=gpus_per_node, time=time,
                     partition=partition, qos=qos, account=account, max_retries=max_retries,
                     job_name=f"wt-{source.stem}")
    for name, text in scripts.items():
        atomic_write_text(out / name, text)
        (out / name).chmod(0o755)
    atomic_write_json(out / "launch.json", {
        "format": "worldtune.launch", "version": 1, "kind": "slurm", "config": str(source), "copy": str(copy),
        "overrides": overrides, "run_dir": str(run_dir), "nodes": nodes, "gpus_per_node": gpus_per_node,
        "partition": partition, "qos": qos, "time": time, "account": account, "max_retries": max_retries,
        "signal_lead_s": SIGNAL_LEAD_S, "workdir": str(Path.cwd()), "python": sys.executable})
    return out / "job.sbatch"


def submit_job(script: Path) -> str:
    """`sbatch --parsable script` -> the job id."""
    if shutil.which("sbatch") is None:
        raise LaunchError(f"sbatch is not on PATH: run this on a SLURM login node, or submit {script} there")
    done = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True)
    if done.returncode != 0:
        msg = (done.stderr or done.stdout).strip().splitlines()
        raise LaunchError(f"sbatch {script} failed: {msg[-1] if msg else f'exit code {done.returncode}'}")
    return done.stdout.strip().split(";")[0]


def run(config: str, overrides: list[str], *, nodes: int = 1, gpus_per_node: int = 8, partition: str | None = None,
        qos: str | None = None, time: str = "48:00:00", account: str | None = None, max_retries: int = 5,
        out: str = "slurm", submit: bool = False) -> str | None:
    """Entry point of `worldtune launch slurm`: write the job folder, and submit it with --submit."""
    from rich.console import Console

    console = Console()
    script = write_job(config, overrides, out, nodes=nodes, gpus_per_node=gpus_per_node, partition=partition,
                       qos=qos, time=time, account=account, max_retries=max_retries)
    console.print(f"wrote {script} ({nodes} node(s) x {gpus_per_node} GPU(s), time {time}, "
                  f"up to {max_retries} requeue(s)); logs go to {script.parent / 'logs'}")
    if not submit:
        console.print(f"submit with: sbatch {script}")
        return None
    job = submit_job(script)
    console.print(f"submitted job {job}: follow it with `tail -f {script.parent}/logs/attempt-*.log`")
    return job
