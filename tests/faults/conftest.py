"""Fixtures of the fault-injection suite: small datasets made fast, and a way to run the CLI as a user would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import worldtune
from worldtune.data.video import write_video
from worldtune.scene.writer import write_demo_dataset

SRC = Path(worldtune.__file__).resolve().parents[1]  # subprocesses run the same code as the tests


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def plain_dataset(root: Path, episodes: int, seed: int = 0) -> Path:
    """A plain dataset (videos/*.mp4 + metas/*.txt) of textured moving noise: quick to write, real to encode.

    Episodes have 20-40 frames, except every fifth one (3, 8, ...): 10 frames, too short for a
    17-frame clip."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (48, 240, 3), dtype=np.uint8)
    for e in range(episodes):
        shift = int(rng.integers(0, 80))
        n = 10 if e % 5 == 3 else int(rng.integers(20, 41))
        fr = np.stack([base[:, shift + i: shift + i + 80] for i in range(n)])
        write_video(root / "videos" / f"ep{e:03d}.mp4", fr, fps=15, preset="ultrafast")
        (root / "metas").mkdir(parents=True, exist_ok=True)
        (root / "metas" / f"ep{e:03d}.txt").write_text(f"moves the block {e}")
    return root


@pytest.fixture(scope="session")
def plain30(tmp_path_factory) -> Path:
    return plain_dataset(tmp_path_factory.mktemp("plain30") / "ds", 30)


@pytest.fixture(scope="session")
def v21(tmp_path_factory) -> Path:
    return write_demo_dataset(tmp_path_factory.mktemp("v21") / "ds", episodes=3, version="v2.1", height=48, width=80,
                              failed=(1,), workers=1)


@pytest.fixture
def v21_copy(v21, tmp_path) -> Path:
    return Path(shutil.copytree(v21, tmp_path / "v21"))


# An uninterrupted LoRA run of 3 steps with a checkpoint after each, small enough to run many times: no
# validation video, one held-out sigma.
RUN3 = ("--train.steps", "3", "--train.checkpoint.every", "1", "--train.val_videos", "0", "--train.val_sigmas", "[0.5]")


@pytest.fixture(scope="session")
def run3(tiny_model_dir, cached_dataset, tmp_path_factory) -> Path:
    """The reference run (`RUN3`) that interrupted and resumed runs must equal, tensor for tensor."""
    from tests.train.conftest import train_cfg
    from worldtune.train.trainer import Trainer

    out = tmp_path_factory.mktemp("reference") / "run3"
    Trainer(train_cfg(tiny_model_dir, cached_dataset, out, *RUN3)).fit()
    return out


def same_checkpoint(a: Path, b: Path) -> bool:
    """Whether two checkpoints hold equal trainable weights and optimizer state (Adam moments and step)."""
    from worldtune.train.checkpoint import CheckpointManager

    ca, cb = CheckpointManager.load(a), CheckpointManager.load(b)
    wa, wb, oa, ob = ca["trainable"], cb["trainable"], ca["optimizer"]["state"], cb["optimizer"]["state"]
    return (len(wa) > 0 and wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
            and oa.keys() == ob.keys()
            and all(torch.equal(oa[i][n], ob[i][n]) for i in oa for n in ("exp_avg", "exp_avg_sq", "step")))


def cli(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """`worldtune <args>` in a fresh process, with this checkout first on the path."""
    return subprocess.run([sys.executable, "-m", "worldtune.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env(), **kw)


def cli_here(*args: str) -> subprocess.CompletedProcess:
    """`worldtune <args>` through the same entry point (`worldtune.cli.main`) in this process: what `cli` checks
    of a command that fails before any work (its exit code and its stderr), without ~5 s of imports per call."""
    import contextlib
    import io

    from worldtune.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(["worldtune", *args], code, out.getvalue(), err.getvalue())


def one_line_error(p: subprocess.CompletedProcess) -> str:
    """The CLI failed with exit 1 and a single `error:` line, no traceback."""
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, p.stderr[-2000:]
    return lines[0]


from tests.infer.conftest import adapter_dir, tiny_pipe  # noqa: E402,F401  (shared fixtures)


# Runs `worldtune ARGS` once per phase, side by side, each in its own process with MODULE.NAME patched to signal
# that process on its first call, then to run as usual: the signal lands at that instant, as a scheduler's would
# (no MODULE: the signal comes once the run has returned, while the process exits).
# The heavy imports happen once, before the processes fork (no torch computation has run yet, so forking is safe):
# each run then costs its own work only. Prints {log file: exit code}. `{imports}`: the modules to import first.
_SIGNAL_AT = r"""
import importlib, json, os, signal, sys, traceback
import worldtune.cli
{imports}

def signal_first(owner, attr, signame):
    raw = vars(owner)[attr]
    func = raw.__func__ if isinstance(raw, staticmethod) else raw
    fired = []
    def wrapper(*a, **k):
        if not fired:
            fired.append(True)
            os.kill(os.getpid(), getattr(signal, signame))
        return func(*a, **k)
    setattr(owner, attr, staticmethod(wrapper) if isinstance(raw, staticmethod) else wrapper)

def run(module, name, signame, log, args):
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(out, 1)
    os.dup2(out, 2)
    code = 1
    try:
        if module:
            owner = importlib.import_module(module)
            *parents, attr = name.split(".")
            for parent in parents:
                owner = getattr(owner, parent)
            signal_first(owner, attr, signame)
        sys.argv = ["worldtune", *args]
        code = worldtune.cli.main()  # as the installed program runs it
        if not module:
            os.kill(os.getpid(), getattr(signal, signame))
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

children = {}
for module, name, signame, log, args in json.loads(sys.argv[1]):
    pid = os.fork()
    if pid == 0:
        run(module, name, signame, log, args)
    children[pid] = log
print(json.dumps({log: os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid, log in children.items()}))
"""


def signal_runs(runs: list[tuple], imports: str) -> dict[str, int]:
    """Exit code per log file of `worldtune` runs, each (module, name, signal, log, args), forked side by side after
    `imports` (Python import lines) from one process as `_SIGNAL_AT` describes."""
    import json

    script = _SIGNAL_AT.replace("{imports}", imports)
    p = subprocess.run([sys.executable, "-c", script, json.dumps(runs)], capture_output=True, text=True, timeout=600,
                       env={**env(), "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.splitlines()[-1])
