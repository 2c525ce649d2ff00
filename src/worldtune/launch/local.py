"""`worldtune launch local`: train (or cache) on G GPUs (or G CPU processes) of this machine, restarting on failure.

`--stage cache` runs `worldtune cache` the same way: each process encodes its share of the clips, a
restart encodes only what is missing, and the logs go to `<cache folder>/logs`.

Each attempt runs `torchrun --standalone --nproc-per-node G -m worldtune.cli train CONFIG ...
--train.resume auto` (plain `python -m worldtune.cli train` when G == 1), so a restart continues
from the newest complete checkpoint. An attempt ends in one of four ways:

    done       exit 0: training finished
    preempted  the trainer saved a checkpoint and exited with 42 (worldtune.train.trainer)
    failed     the trainer printed a one-line `error: ...` (bad config, missing data): not retried
    crashed    anything else, e.g. a rank killed or out of memory (torchrun reports it as exit 1)

Preempted and crashed attempts are restarted up to `max_restarts` times. SIGTERM, SIGUSR1 and
SIGINT sent to the launcher are forwarded (as USR1) to the training processes, never to torchrun:
they checkpoint at the next step boundary and exit, and the launcher exits with 42 instead of
restarting, so an outer scheduler can requeue it. A second SIGINT kills the attempt at once.

Logs: `<train.out>/logs/attempt-<k>.log` holds the output of attempt k (also echoed to the
terminal), and `<train.out>/logs/launch.jsonl` one JSON row per attempt (format worldtune.launch).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import typer

from worldtune.errors import LaunchError

REQUEUE_EXIT_CODE = 42  # the trainer's "checkpoint saved, requeue me" (worldtune.train.trainer)
RESEND_EVERY_S = 5.0  # re-send the stop signal: a trainer whose Python is still starting ignores it
FORWARDED = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
_USER_ERROR = re.compile(r"^(\[[^\]]*\]:?\s*)?error: ", re.MULTILINE)


@dataclass
class Attempt:
    """One run of the training command, as logged in launch.jsonl."""

    attempt: int
    outcome: str  # done | preempted | failed | crashed
    exit_code: int
    start_step: int  # newest complete checkpoint when the attempt started (0: none)
    end_step: int  # newest complete checkpoint when it ended
    seconds: float
    log: str
    signalled: bool = False  # the launcher was asked to stop during this attempt


STAGES = ("train", "cache")


def train_command(config: str | Path, overrides: list[str], gpus: int, python: str | None = None,
                  stage: str = "train") -> list[str]:
    """The command of one attempt. Training's overrides come before `--train.resume auto`, which always
    wins; the cache resumes by itself."""
    python = python or sys.executable
    args = ["-m", "worldtune.cli", stage, str(config), *overrides] + (
        ["--train.resume", "auto"] if stage == "train" else [])
    if gpus == 1:
        return [python, *args]
    return [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(gpus),
            "--max-restarts", "0", *args]


def child_pids(pid: int) -> list[int]:
    """Direct children of a process (Linux /proc): torchrun's workers."""
    kids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name (field 2) may hold spaces: the parent pid is the 2nd field after its ")"
        fields = stat[stat.rindex(")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            kids.append(int(entry.name))
    return kids


def newest_step(run_dir: Path) -> int:
    """Step of the newest complete checkpoint (0: none). Reads the folder names that
    worldtune.train.checkpoint writes (step-NNNNNNNN/COMPLETE) without importing torch: the
    launcher stays light, and the trainers start sooner."""
    steps = [int(p.name[5:]) for p in (run_dir / "checkpoints").glob("step-*")
             if p.name[5:].isdigit() and (p / "COMPLETE").is_file()]
    return max(steps, default=0)


def classify(code: int, run_dir: Path, started: float, log_text: str) -> str:
    """What an attempt's exit means (see the module docstring)."""
    if code == 0:
        return "done"
    if code == REQUEUE_EXIT_CODE:
        return "preempted"
    run_json = run_dir / "run.json"
    try:  # torchrun turns a worker's exit 42 into its own 1: the trainer's run.json says what happened
        if run_json.stat().st_mtime >= started and json.loads(run_json.read_text()).get("status") == "preempted":
            return "preempted"
    except (OSError, ValueError):
        pass
    return "failed" if _USER_ERROR.search(log_text) else "crashed"


class _Attempt:
    """One child process: its output teed to a log file, stop signals forwarded to its trainers."""

    def __init__(self, cmd: list[str], log: Path, gpus: int):
        self.gpus = gpus
        self.log = log
        self.stop_requested = False
        self._last_send = 0.0
        self._file = open(log, "ab")

        def _ignore_usr1() -> None:  # inherited until the trainer installs its handler: an early USR1 cannot kill
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)

        env = {**os.environ, "PYTHONUNBUFFERED": "1", "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True, preexec_fn=_ignore_usr1)
        self._reader = threading.Thread(target=self._tee, daemon=True)
        self._reader.start()

    def _tee(self) -> None:
        assert self.proc.stdout is not None
        out = getattr(sys.stdout, "buffer", None)
        for line in iter(self.proc.stdout.readline, b""):
            self._file.write(line)
            self._file.flush()
            if out is not None:
                out.write(line)
                out.flush()
            else:  # a text-only stdout (some test harnesses, notebooks)
                sys.stdout.write(line.decode(errors="replace"))

    def trainers(self) -> list[int]:
        return [self.proc.pid] if self.gpus == 1 else child_pids(self.proc.pid)

    def request_stop(self) -> None:
        """Ask the trainers to checkpoint and exit (USR1: the trainer treats it like SIGTERM)."""
        self.stop_requested = True
        self._last_send = time.monotonic()
        for pid in self.trainers():
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        for pid in [*self.trainers(), self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self) -> int:
        while True:
            try:
                code = self.proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if self.stop_requested and time.monotonic() - self._last_send > RESEND_EVERY_S:
                    self.request_stop()
        self._reader.join(timeout=10)
        self._file.close()
        return code


def launch(config: str | Path, overrides: list[str], gpus: int = 1, max_restarts: int = 3,
           stage: str = "train") -> list[Attempt]:
    """Run attempts until one finishes, fails on bad input, is stopped by a signal, or restarts run out."""
    from worldtune.config import load_config

    if stage not in STAGES:
        raise LaunchError(f"--stage {stage}: use one of {', '.join(STAGES)}")
    if gpus < 1:
        raise LaunchError(f"--gpus {gpus}: must be at least 1 (on a machine without GPUs, G CPU processes run)")
    if max_restarts < 0:
        raise LaunchError(f"--max-restarts {max_restarts}: must be 0 or more")
    config = Path(config).resolve()
    cfg = load_config(config, overrides)  # bad configs fail here, once, not in every attempt
    run_dir = Path(cfg.train.out) if stage == "train" else _cache_dir(cfg)
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    first = 1 + max((int(m.group(1)) for p in logs.glob("attempt-*.log")
                     if (m := re.fullmatch(r"attempt-(\d+)\.log", p.name))), default=0)
    cmd = train_command(config, overrides, gpus, stage=stage)
    attempts: list[Attempt] = []
    current: list[_Attempt] = []
    signals_seen: list[int] = []

    def _on_signal(signum, _frame) -> None:
        signals_seen.append(signum)
        if not current:
            return
        if signum == signal.SIGINT and signals_seen.count(signal.SIGINT) > 1:
            current[0].kill()
        else:
            current[0].request_stop()

    old = {s: signal.signal(s, _on_signal) for s in FORWARDED}
    try:
        for k in range(first, first + max_restarts + 1):
            log = logs / f"attempt-{k}.log"
            start_step, t0, wall0 = newest_step(run_dir), time.monotonic(), time.time()
            with open(log, "ab") as f:
                f.write(f"# worldtune launch local: attempt {k}, from step {start_step}: {' '.join(cmd)}\n".encode())
            current[:] = [_Attempt(cmd, log, gpus)]
            if signals_seen:  # a signal that came between attempts
                current[0].request_stop()
            code = current[0].wait()
            current.clear()
            outcome = classify(code, run_dir, wall0 - 1.0, log.read_text(errors="replace"))
            attempts.append(Attempt(k, outcome, code, start_step, newest_step(run_dir),
                                    round(time.monotonic() - t0, 1), str(log), bool(signals_seen)))
            with open(logs / "launch.jsonl", "a") as f:
                f.write(json.dumps({"format": "worldtune.launch", "version": 1, "kind": "local", "gpus": gpus,
                                    "stage": stage, **asdict(attempts[-1])}) + "\n")
            if outcome in ("done", "failed") or signals_seen:
                break
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return attempts


def _cache_dir(cfg) -> Path:
    """The cache folder `worldtune cache` will write for this config (without loading the model)."""
    from worldtune.data.cache import cache_settings, default_cache_dir
    from worldtune.data.dataset import read_dataset
    from worldtune.models.family import family_of
    from worldtune.models.load import resolve_spec

    if cfg.cache.out:
        return Path(cfg.cache.out)
    spec = resolve_spec(cfg.model.name, cfg.model.path, cfg.model.revision)
    info, _ = read_dataset(cfg.cache.dataset)
    kind = family_of(spec).resolve_text_kind(cfg.cache.text)
    return default_cache_dir(cfg.cache.dataset, cache_settings(cfg, info, spec, kind)["key"])


def exit_code(attempts: list[Attempt]) -> int:
    last = attempts[-1]
    if last.outcome == "done":
        return 0
    if last.outcome == "preempted":
        return REQUEUE_EXIT_CODE
    return last.exit_code or 1


def print_summary(attempts: list[Attempt], max_restarts: int, stage: str = "train") -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="worldtune launch local")
    for col in ("attempt", "outcome", "exit code", "from step", "to step", "seconds", "log"):
        table.add_column(col)
    for a in attempts:
        table.add_row(str(a.attempt), a.outcome, str(a.exit_code), str(a.start_step), str(a.end_step),
                      f"{a.seconds:.1f}", a.log)
    console = Console()
    console.print(table)
    last = attempts[-1]
    restarts = len(attempts) - 1
    if last.outcome == "done":
        console.print(f"{'training' if stage == 'train' else 'caching'} finished after {restarts} restart(s)")
    elif last.outcome == "failed":
        console.print(f"attempt {last.attempt} failed on its input (see the `error:` line in {last.log}); not retried")
    elif last.signalled:
        console.print(f"stopped by a signal: checkpoint at step {last.end_step}; run the same command to continue")
    else:
        console.print(f"gave up after {restarts} restart(s) (--max-restarts {max_restarts}); the newest checkpoint "
                      f"is step {last.end_step}: run the same command again to continue")


def run(config: str, overrides: list[str], *, gpus: int = 1, max_restarts: int = 3,
        stage: str = "train") -> list[Attempt]:
    """Entry point of `worldtune launch local`: exits non-zero (42 when preempted) unless the stage finished."""
    attempts = launch(config, overrides, gpus=gpus, max_restarts=max_restarts, stage=stage)
    print_summary(attempts, max_restarts, stage)
    code = exit_code(attempts)
    if code:
        raise typer.Exit(code)
    return attempts
