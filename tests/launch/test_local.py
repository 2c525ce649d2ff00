"""The local launcher: a rank killed mid-run is restarted and resumes exactly from the last checkpoint."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from worldtune.launch.local import REQUEUE_EXIT_CODE, child_pids, classify, train_command
from worldtune.train.checkpoint import CheckpointManager, step_of

REPO = Path(__file__).resolve().parents[2]
STEPS = 16


def _config(path: Path, model: Path, data: Path, out: Path) -> Path:
    path.write_text(f"""[model]
path = "{model}"
[train]
dataset = "{data}"
out = "{out}"
steps = {STEPS}
warmup = 2
lr = 1e-3
log_every = 1
tensorboard = false
val_samples = 1
text_dropout = 0.3
[train.checkpoint]
every = 1
keep = 2
""")
    return path


def _launch(config: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "worldtune.cli", "launch", "local", str(config), *extra],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def _metrics(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _rank_pid(launcher: int, rank: int) -> int | None:
    """The pid of one training rank: a child of torchrun, itself a child of the launcher."""
    for torchrun in child_pids(launcher):
        for pid in child_pids(torchrun):
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"RANK={rank}".encode() in env:
                return pid
    return None


def _final(run: Path) -> tuple[dict, dict]:
    ck = CheckpointManager.load(run / "checkpoints" / f"step-{STEPS:08d}")
    return ck["trainable"], ck["optimizer"]


def test_killed_rank_is_restarted_and_resumes_exactly(launch_model_dir, launch_dataset, tmp_path):
    ref_cfg = _config(tmp_path / "ref.toml", launch_model_dir, launch_dataset, tmp_path / "ref")
    crash_cfg = _config(tmp_path / "crash.toml", launch_model_dir, launch_dataset, tmp_path / "crash")
    ref = _launch(ref_cfg, "--gpus", "2", "--max-restarts", "0")
    crash = _launch(crash_cfg, "--gpus", "2", "--max-restarts", "2")
    try:
        deadline = time.time() + 180
        # kill rank 1 once step 2 is logged: checkpoint k >= 1 is complete and the run is mid-way
        while not any(m.get("step", 0) >= 2 for m in _metrics(tmp_path / "crash")):
            assert crash.poll() is None and time.time() < deadline, crash.stdout.read().decode()[-3000:]
            time.sleep(0.05)
        victim = _rank_pid(crash.pid, 1)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        killed_at = max(m["step"] for m in _metrics(tmp_path / "crash") if "step" in m)
        assert killed_at < STEPS
        for p in (crash, ref):
            assert p.wait(240) == 0, p.stdout.read().decode()[-3000:]
    finally:
        for p in (crash, ref):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)

    rows = [json.loads(x) for x in (tmp_path / "crash" / "logs" / "launch.jsonl").read_text().splitlines()]
    assert [r["outcome"] for r in rows] == ["crashed", "done"], rows
    resumed = rows[1]["start_step"]
    assert 1 <= resumed <= killed_at + 1 and rows[1]["end_step"] == STEPS
    assert (tmp_path / "crash" / "logs" / "attempt-1.log").is_file()
    assert "--train.resume auto" in (tmp_path / "crash" / "logs" / "attempt-2.log").read_text()

    # the second attempt started right after its checkpoint; every step's loss equals the uninterrupted run
    crash_rows = [m for m in _metrics(tmp_path / "crash") if "loss" in m]
    steps = [m["step"] for m in crash_rows]
    assert steps[-(STEPS - resumed):] == list(range(resumed + 1, STEPS + 1))
    last_loss = {m["step"]: m["loss"] for m in crash_rows}
    ref_loss = {m["step"]: m["loss"] for m in _metrics(tmp_path / "ref") if "loss" in m}
    assert last_loss == ref_loss and len(ref_loss) == STEPS

    # checkpoints are consistent: folder step == recorded step, newest is the final one
    complete = CheckpointManager(tmp_path / "crash").complete()
    assert step_of(complete[-1]) == STEPS
    for ck in complete:
        assert json.loads((ck / "state.json").read_text())["step"] == step_of(ck)

    wa, oa = _final(tmp_path / "ref")
    wb, ob = _final(tmp_path / "crash")
    assert wa.keys() == wb.keys() and len(wa) > 0
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    for pid, st in oa["state"].items():
        assert torch.equal(st["exp_avg"], ob["state"][pid]["exp_avg"])
        assert torch.equal(st["exp_avg_sq"], ob["state"][pid]["exp_avg_sq"])
    assert json.loads((tmp_path / "crash" / "run.json").read_text())["status"] == "done"


def test_input_error_is_not_retried(launch_model_dir, tmp_path):
    cfg = _config(tmp_path / "bad.toml", launch_model_dir, tmp_path / "no-such-dataset", tmp_path / "run")
    p = _launch(cfg, "--gpus", "1", "--max-restarts", "3")
    out = p.communicate(timeout=120)[0].decode()
    assert p.returncode == 1, out[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "logs" / "launch.jsonl").read_text().splitlines()]
    assert [r["outcome"] for r in rows] == ["failed"]
    assert "not retried" in out


def test_commands_and_outcomes(tmp_path):
    one = train_command("c.toml", ["--train.steps", "3"], 1, python="py")
    assert one == ["py", "-m", "worldtune.cli", "train", "c.toml", "--train.steps", "3", "--train.resume", "auto"]
    two = train_command("c.toml", [], 2, python="py")
    assert two[:7] == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--max-restarts"]
    assert two[-6:] == ["-m", "worldtune.cli", "train", "c.toml", "--train.resume", "auto"]

    assert classify(0, tmp_path, 0.0, "") == "done"
    assert classify(REQUEUE_EXIT_CODE, tmp_path, 0.0, "") == "preempted"
    assert classify(1, tmp_path, 0.0, "Traceback ...\nRuntimeError: boom") == "crashed"
    assert classify(1, tmp_path, 0.0, "loading\nerror: config file x does not exist: pass a TOML file") == "failed"
    (tmp_path / "run.json").write_text(json.dumps({"status": "preempted"}))
    assert classify(1, tmp_path, time.time() - 60, "") == "preempted"  # torchrun's 1 for a worker's 42
    assert classify(1, tmp_path, time.time() + 60, "") == "crashed"  # a run.json from an earlier attempt
