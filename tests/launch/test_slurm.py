"""The SLURM launcher: the generated scripts (golden files) and the requeue protocol, run with fake
`srun`, `scontrol` and torchrun that record what they were asked to do."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from worldtune.errors import ConfigError, LaunchError, ModelError
from worldtune.launch.slurm import render, run, write_job

GOLDEN = Path(__file__).parent / "golden"
JOB_ID = "4242"

FAKE_SRUN = """#!/bin/bash
echo "$@" >> "$FAKE_DIR/srun.args"
if [ -n "${FAKE_RUN_JSON:-}" ]; then printf '{\\n "status": "%s",\\n "step": 7\\n}' "$FAKE_RUN_JSON" > "$FAKE_RUN_DIR/run.json"; fi
if [ "${FAKE_SRUN_WAIT:-0}" = 1 ]; then
  trap 'echo usr1 >> "$FAKE_DIR/srun.signals"; exit 1' USR1
  touch "$FAKE_DIR/srun.started"
  while :; do sleep 0.05; done
fi
echo "fake training output"
exit "${FAKE_SRUN_RC:-0}"
"""

FAKE_SCONTROL = """#!/bin/bash
echo "$@" >> "$FAKE_DIR/scontrol.args"
if [ "$1 $2" = "show hostnames" ]; then echo node-a; echo node-b; fi
exit 0
"""

# stands in for "$PYTHON -m torch.distributed.run ...": one worker that exits 42 on USR1, like the trainer
# The worker ignores a second USR1 once it is exiting: with the whole step signalled it gets one from
# SLURM and one forwarded by the node script, and the second can land after Python's handlers are gone.
FAKE_TORCHRUN = """#!/bin/bash
echo "$@" > "$FAKE_DIR/torchrun.args"
"$REAL_PYTHON" -c 'import signal, sys, time
signal.signal(signal.SIGUSR1, lambda *a: (signal.signal(signal.SIGUSR1, signal.SIG_IGN), sys.exit(42)))
open(sys.argv[1], "w").close()
time.sleep(60)' "$FAKE_DIR/worker.ready" &
wait $!
echo "worker exited $?" >> "$FAKE_DIR/torchrun.log"
exit 1
"""


def _write_exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def _config(tmp_path: Path) -> Path:
    (tmp_path / "ds").mkdir(exist_ok=True)
    (tmp_path / "ds" / "info.json").write_text('{"format": "worldtune.dataset", "version": 1}')
    cfg = tmp_path / "recipe.toml"
    cfg.write_text(f'[model]\nname = "tiny-predict2.5"\n[train]\ndataset = "{tmp_path / "ds"}"\n'
                   f'out = "{tmp_path / "run"}"\nsteps = 50\n')
    return cfg


def _job(tmp_path: Path, max_retries: int = 2) -> Path:
    return write_job(_config(tmp_path), ["--train.steps", "10", "--train.lr", "1e-4"], tmp_path / "job", nodes=2,
                     gpus_per_node=8, partition="gpu", qos="high", time="04:00:00", account="proj",
                     max_retries=max_retries)


def _normalise(text: str, tmp_path: Path) -> str:
    return text.replace(str(tmp_path), "<TMP>").replace(sys.executable, "<PYTHON>").replace(str(Path.cwd()), "<CWD>")


@pytest.mark.parametrize("name", ["job.sbatch", "node.sh"])
def test_scripts_match_golden(tmp_path, name):
    script = _job(tmp_path, max_retries=3)
    got = _normalise((script.parent / name).read_text(), tmp_path)
    golden = GOLDEN / name
    if os.environ.get("WORLDTUNE_UPDATE_GOLDEN"):
        golden.write_text(got)
    assert got == golden.read_text(), f"regenerate with WORLDTUNE_UPDATE_GOLDEN=1 if the change is intended ({name})"
    job = script.parent
    assert (job / "config.toml").read_text() == _config(tmp_path).read_text()  # the job runs on a copy
    assert os.access(job / name, os.X_OK)


def test_bad_input_fails_before_writing(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        write_job(tmp_path / "nope.toml", [], tmp_path / "job")
    with pytest.raises(ConfigError, match="train.steps"):
        write_job(_config(tmp_path), ["--train.steps", "0"], tmp_path / "job")
    with pytest.raises(LaunchError, match="--nodes 0"):
        write_job(_config(tmp_path), [], tmp_path / "job", nodes=0)
    # what the job reads is checked here, on the login node, not after hours in the queue
    with pytest.raises(LaunchError, match="train.dataset=.*nowhere: no prepared dataset"):
        write_job(_config(tmp_path), ["--train.dataset", str(tmp_path / "nowhere")], tmp_path / "job")
    with pytest.raises(ModelError, match="model.path=.*no-model: no such directory"):
        write_job(_config(tmp_path), ["--model.path", str(tmp_path / "no-model")], tmp_path / "job")
    with pytest.raises(LaunchError, match="real-size model and model.path is not set"):
        write_job(_config(tmp_path), ["--model.name", "cosmos-predict2.5-2b"], tmp_path / "job")
    assert not (tmp_path / "job" / "job.sbatch").exists()


def test_submit_without_sbatch_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    with pytest.raises(LaunchError, match="sbatch is not on PATH"):
        run(str(_config(tmp_path)), [], out=str(tmp_path / "job"), submit=True)
    assert (tmp_path / "job" / "job.sbatch").is_file()  # the script is still written for a manual submit


@pytest.fixture
def fakes(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _write_exe(bin_dir / "srun", FAKE_SRUN)
    _write_exe(bin_dir / "scontrol", FAKE_SCONTROL)
    return bin_dir


def _env(tmp_path: Path, bin_dir: Path, restarts: int | None, **extra: str) -> dict:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DIR": str(tmp_path),
           "FAKE_RUN_DIR": str(tmp_path / "run"), "SLURM_JOB_ID": JOB_ID, "SLURM_JOB_NODELIST": "node-[a-b]",
           "SLURM_NNODES": "2", "SLURM_JOB_NUM_NODES": "2", "SLURM_CPUS_PER_TASK": "16", **extra}
    env.pop("SLURM_RESTART_COUNT", None)
    if restarts is not None:
        env["SLURM_RESTART_COUNT"] = str(restarts)
    return env


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _simulate_slurm(tmp_path: Path, script: Path, bin_dir: Path, use_restart_count: bool, **extra: str) -> list[int]:
    """Run the batch script the way SLURM would: again after every `scontrol requeue`. Exit codes."""
    codes, restarts = [], 0
    for _ in range(10):
        env = _env(tmp_path, bin_dir, restarts if use_restart_count else None, **extra)
        codes.append(subprocess.run(["bash", str(script)], env=env, capture_output=True, timeout=30).returncode)
        requeued = sum(line == f"requeue {JOB_ID}" for line in _lines(tmp_path / "scontrol.args"))
        if requeued == restarts:
            return codes
        restarts = requeued
    raise AssertionError("the job requeued itself more than 10 times")


@pytest.mark.parametrize("use_restart_count", [True, False], ids=["SLURM_RESTART_COUNT", "counter-file"])
def test_exit_42_requeues_until_retries_are_used_up(tmp_path, fakes, use_restart_count):
    script = _job(tmp_path, max_retries=2)
    codes = _simulate_slurm(tmp_path, script, fakes, use_restart_count, FAKE_SRUN_RC="42")
    assert codes == [0, 0, 42]  # two requeues, then "used up": exit 42 and no third requeue
    assert _lines(tmp_path / "scontrol.args").count(f"requeue {JOB_ID}") == 2
    job = script.parent
    assert (job / "attempts").read_text().strip() == "3"
    for k in (1, 2, 3):
        assert "fake training output" in (job / "logs" / f"attempt-{k}.log").read_text()
    srun = _lines(tmp_path / "srun.args")
    assert len(srun) == 3 and all(a.endswith(f"--label bash {job}/node.sh") for a in srun)
    assert "--nodes=2 --ntasks-per-node=1 --cpus-per-task=16" in srun[0]


def test_crash_is_not_requeued(tmp_path, fakes):
    script = _job(tmp_path)
    assert _simulate_slurm(tmp_path, script, fakes, True, FAKE_SRUN_RC="1") == [1]
    assert f"requeue {JOB_ID}" not in _lines(tmp_path / "scontrol.args")
    assert _lines(tmp_path / "scontrol.args") == ["show hostnames node-[a-b]"]


def test_torchrun_failure_with_preempted_run_json_requeues(tmp_path, fakes):
    # torchrun reports a worker's exit 42 as 1; the trainer's run.json written in this attempt tells the truth
    script = _job(tmp_path)
    (tmp_path / "run").mkdir()
    codes = _simulate_slurm(tmp_path, script, fakes, True, FAKE_SRUN_RC="1", FAKE_RUN_JSON="preempted")
    assert codes == [0, 0, 42]
    # a stale run.json (older than the attempt) is ignored
    (tmp_path / "scontrol.args").unlink()
    (tmp_path / "run" / "run.json").write_text('{\n "status": "preempted"\n}')
    os.utime(tmp_path / "run" / "run.json", (1, 1))
    env = _env(tmp_path, fakes, 0, FAKE_SRUN_RC="1")
    assert subprocess.run(["bash", str(script)], env=env, capture_output=True, timeout=30).returncode == 1


def test_usr1_to_batch_shell_reaches_srun_and_requeues(tmp_path, fakes):
    script = _job(tmp_path)
    p = subprocess.Popen(["bash", str(script)], env=_env(tmp_path, fakes, 0, FAKE_SRUN_WAIT="1"),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 20
    while not (tmp_path / "srun.started").exists():
        assert time.time() < deadline and p.poll() is None
        time.sleep(0.05)
    p.send_signal(signal.SIGUSR1)  # what `#SBATCH --signal=B:USR1@120` does
    assert p.wait(20) == 0
    assert _lines(tmp_path / "srun.signals") == ["usr1"]
    assert _lines(tmp_path / "scontrol.args")[-1] == f"requeue {JOB_ID}"
    said = p.stdout.read().decode()
    assert "preemption signal" in said and "requeue 1 of 2" in said, said


@pytest.mark.parametrize("to_group", [False, True], ids=["srun-forwards-to-task", "slurm-signals-whole-step"])
def test_node_script_forwards_usr1_to_workers_not_torchrun(tmp_path, to_group):
    fake_python = _write_exe(tmp_path / "fake-python", FAKE_TORCHRUN)
    cfg = _config(tmp_path)
    scripts = render(cfg, ["--train.steps", "10"], tmp_path / "run", tmp_path, nodes=2, gpus_per_node=4,
                     time="01:00:00", python=str(fake_python))
    node = _write_exe(tmp_path / "node.sh", scripts["node.sh"])
    env = {**os.environ, "FAKE_DIR": str(tmp_path), "REAL_PYTHON": sys.executable, "SLURM_NNODES": "2",
           "SLURM_JOB_ID": JOB_ID, "MASTER_ADDR": "node-a", "MASTER_PORT": "29999"}
    p = subprocess.Popen(["bash", str(node)], env=env, start_new_session=True)
    deadline = time.time() + 20
    while not (tmp_path / "worker.ready").exists():
        assert time.time() < deadline and p.poll() is None
        time.sleep(0.05)
    if to_group:
        os.killpg(p.pid, signal.SIGUSR1)  # torchrun gets it too, and must survive it
    else:
        p.send_signal(signal.SIGUSR1)
    assert p.wait(20) == 42
    assert _lines(tmp_path / "torchrun.log") == ["worker exited 42"]  # torchrun outlived the signal
    args = (tmp_path / "torchrun.args").read_text().split()
    assert args[:2] == ["-m", "torch.distributed.run"]
    joined = " ".join(args)
    assert "--nnodes 2 --nproc-per-node 4 --max-restarts 0" in joined
    assert f"--rdzv-backend c10d --rdzv-endpoint node-a:29999 --rdzv-id {JOB_ID}" in joined
    assert joined.endswith(f"-m worldtune.cli train {cfg} --train.steps 10 --train.resume auto")
