"""SIGTERM or SIGUSR1 at any point of a resumed `worldtune train`: a checkpoint (or a line saying why none was
needed) and exit 42, never the signal's default death (exit 143 / 138) that a launcher reads as a crash."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.train.conftest import train_args
from worldtune.atomic import atomic_write_json, atomic_write_jsonl, read_jsonl
from worldtune.train.checkpoint import CheckpointManager
from worldtune.train.trainer import REQUEUE_EXIT_CODE

from .conftest import RUN3, signal_runs

TRAIN_IMPORTS = """  # imported once, before the forks (no torch computation has run yet)
import diffusers.models.transformers, peft, torch._dynamo
import worldtune.cli, worldtune.models.load, worldtune.train.curves, worldtune.train.trainer
"""

# phase -> (module, function the signal lands in, signal, newest checkpoint step afterwards). The run resumes from
# step 1 and trains steps 2 and 3; validation, the last save and the export follow, then the summary.
PHASES = {
    "model load": ("worldtune.models.load", "load_transformer", "SIGTERM", 1),
    "checkpoint load": ("worldtune.train.checkpoint", "CheckpointManager.load", "SIGTERM", 1),
    "first step": ("worldtune.train.trainer", "Trainer.train_step", "SIGUSR1", 2),
    "validation": ("worldtune.train.trainer", "Trainer.validate", "SIGTERM", 3),
    "export": ("worldtune.train.trainer", "Trainer.export", "SIGTERM", 3),
    "summary": ("worldtune.train.curves", "loss_plot", "SIGUSR1", 3),
}
EXITING = ("", "", "SIGTERM", 3)  # after the run returned: the process is exiting with its code already decided


def _killed_while_saving_step_2(run3: Path, out: Path) -> Path:
    """`run3` as a kill -9 inside the write of step 2's checkpoint leaves it: step 1 complete, step 2 a half-written
    temp folder, step 2 logged, run.json still `running`."""
    step1 = run3 / "checkpoints" / "step-00000001"
    shutil.copytree(step1, out / "checkpoints" / step1.name)
    partial = out / "checkpoints" / ".tmp-step-00000002"
    partial.mkdir()
    weights = (run3 / "checkpoints" / "step-00000002" / "trainable.safetensors").read_bytes()
    (partial / "trainable.safetensors").write_bytes(weights[: len(weights) // 2])
    atomic_write_jsonl(out / "metrics.jsonl", [r for r in read_jsonl(run3 / "metrics.jsonl")
                                               if r["step"] <= 2 and "val_loss" not in r])
    shutil.copy(run3 / "config.toml", out / "config.toml")
    run = json.loads((run3 / "run.json").read_text())
    atomic_write_json(out / "run.json", {**run, "status": "running", "step": 1, "summary": None})
    return out


@pytest.fixture(scope="module")
def stopped(run3, tiny_model_dir, cached_dataset, tmp_path_factory) -> dict[str, tuple[Path, int, str]]:
    """Each phase's run folder, exit code and output."""
    root = tmp_path_factory.mktemp("signals")
    runs, outs = [], {}
    for phase, (module, name, signame, _) in {**PHASES, "exiting": EXITING}.items():
        out = outs[phase] = _killed_while_saving_step_2(run3, root / phase.replace(" ", "_"))
        args = ["train", *train_args(tiny_model_dir, cached_dataset, out, *RUN3, "--train.resume", "auto")]
        runs.append((module, name, signame, str(root / f"{out.name}.log"), args))
    codes = signal_runs(runs, TRAIN_IMPORTS)
    return {phase: (outs[phase], codes[log], Path(log).read_text()) for phase, (*_, log, _) in zip(outs, runs)}


@pytest.mark.parametrize("phase", list(PHASES))
def test_signal_in_a_resumed_run_saves_or_says_why_not_and_exits_42(phase, stopped):
    out, code, output = stopped[phase]
    assert code == REQUEUE_EXIT_CODE, f"{phase}: exit {code}\n{output[-3000:]}"
    signame, step = PHASES[phase][2:]
    (said,) = [line for line in output.splitlines() if line.startswith(f"stopped by {signame}")]
    newest = CheckpointManager(out).newest()
    assert newest is not None and CheckpointManager.load(newest)["state"]["step"] == step, (phase, newest)
    assert newest.name in said, said  # the line names the checkpoint that holds the run's state
    run = json.loads((out / "run.json").read_text())
    if phase == "model load":  # stopped before the run folder was touched
        assert run["status"] == "running"
    elif phase == "summary":  # the run had finished: nothing was left to save
        assert run["status"] == "done" and run["step"] == step
    else:
        assert run["status"] == "preempted" and run["step"] == step and run["signal"] == signame
        assert not [p for p in (out / "checkpoints").iterdir() if p.name.startswith(".tmp-")]


def test_signal_while_a_finished_run_exits_changes_nothing(stopped):
    out, code, output = stopped["exiting"]
    assert code == 0, f"exit {code}\n{output[-3000:]}"  # not 143: the run is done, and says so
    assert json.loads((out / "run.json").read_text())["status"] == "done"
    assert CheckpointManager(out).newest().name == "step-00000003" and "stopped by" not in output
