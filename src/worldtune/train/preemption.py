"""`Preemption`: a stop request (SIGTERM, SIGUSR1) noted from the first instruction of `worldtune train` to its last.

Why: a scheduler signals a job at a moment of its choosing (SLURM before a time limit or a preemption, `worldtune
launch`, a spot instance being reclaimed): while Python imports torch, while the model or a checkpoint loads, in
the first step, in validation, during the export, or while the summary is drawn. Both signals kill a process by
default (exit 143 or 138), which a launcher takes for a crash, not a requeue. So `worldtune train` installs this
handler before it does anything else and holds it until it returns. The handler only notes the signal; the
trainer looks at the note at safe points, where it saves a checkpoint (or says why none is needed) and exits
with `REQUEUE_EXIT_CODE`.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Any, Iterator

REQUEUE_EXIT_CODE = 42  # "preempted, checkpoint saved: requeue me" (launchers map it to scontrol requeue)
PREEMPT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Preemption:
    """Which stop signal this process received first, if any, while `held`."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._previous: dict[int, Any] | None = None

    @property
    def requested(self) -> bool:
        return self.signal is not None

    @contextmanager
    def held(self, restore: bool = True) -> Iterator["Preemption"]:
        """Note stop signals inside the block (nested blocks share the outermost one's handler).

        When the outermost block ends, the previous handlers come back and the note is cleared, so a later run in
        the same process starts clean. They become SIG_IGN instead after a stop, because a scheduler repeats its
        signal and a repeat must not kill the exit, and with `restore=False`, for a process that ends with the
        block: the interpreter's shutdown takes a while, and a signal then must not turn a finished run into a
        crash. Signal handlers belong to the main thread: elsewhere the block changes nothing.
        """
        outermost = self._previous is None and threading.current_thread() is threading.main_thread()
        if outermost:
            self.signal = None
            self._previous = {s: signal.signal(s, self._note) for s in PREEMPT_SIGNALS}
        try:
            yield self
        finally:
            if outermost:
                previous, self._previous = self._previous or {}, None
                for s, handler in previous.items():
                    signal.signal(s, handler if restore and self.signal is None else signal.SIG_IGN)
                self.signal = None

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        if self.signal is None:
            self.signal = signal.Signals(signum).name


PREEMPTION = Preemption()  # signals belong to the process, so one note per process
