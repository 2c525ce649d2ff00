"""Error types of worldtune.

Every error a user can cause (a bad path, a bad config value, a foreign checkpoint) is raised as
one of these, with a message that names the file or value and the fix. The CLI prints them on
one line and exits with code 1; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class WorldtuneError(Exception):
    """Base class: a problem with the user's input, reported in one line."""


class ConfigError(WorldtuneError):
    """A config file or value is invalid."""


class ModelError(WorldtuneError):
    """A model directory or spec is missing, malformed or of the wrong kind."""


class DatasetError(WorldtuneError):
    """A dataset, manifest or cache is missing, malformed or does not match."""


class CheckpointError(WorldtuneError):
    """A checkpoint is incomplete or belongs to another run or model."""


class GenerationError(WorldtuneError):
    """Generation inputs or adapters are invalid."""


class EvaluationError(WorldtuneError):
    """Evaluation inputs or endpoints are invalid."""


class NotBuiltError(WorldtuneError):
    """A stage that exists in the CLI but is not implemented yet."""

    exit_code = 2


class ServeError(WorldtuneError):
    """A request to the world-model server is malformed or out of order, or the server cannot be reached."""


class LaunchError(WorldtuneError):
    """A launcher (local torchrun or SLURM) cannot start, or its tools are missing."""


class OutputError(WorldtuneError):
    """An output file cannot be written (I/O error, permissions, quota): the run stops and can be rerun.

    Never a verdict on an input: a stage that drops bad inputs must not count this as one."""


class DiskFullError(OutputError):
    """Out of disk space (or quota) while writing: the run stops (not skips the item) and resumes on rerun."""

    def __init__(self, message: str, what: str = "disk full") -> None:
        super().__init__(message)
        self.what = what  # or "disk quota exceeded": what the operating system said, for a caller's own message
