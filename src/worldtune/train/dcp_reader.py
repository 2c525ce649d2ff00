"""Read sharded (torch.distributed.checkpoint) checkpoints without running code from them.

Why: PyTorch's `FileSystemReader` unpickles `.metadata` with plain `pickle.load`, and its default
planners load non-tensor items with `torch.load(weights_only=False)`; a crafted checkpoint
folder would run code on `worldtune export` or `--train.resume`. Here `.metadata` is unpickled
with an allow-list of the classes that metadata legitimately holds (DCP's own dataclasses, torch
sizes, dtypes and layouts, paths), anything else is refused in one line, and non-tensor items are
loaded with `torch.load(weights_only=True)`. Tensor data was already read with
`weights_only=True` by PyTorch itself.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from worldtune.errors import CheckpointError

_DCP_META = "torch.distributed.checkpoint.metadata"
_ALLOWED: dict[str, set[str]] = {
    _DCP_META: {"Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
                "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING"},
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"PosixPath", "PurePosixPath"},
    "collections": {"OrderedDict"},
    "builtins": {"set", "frozenset", "slice"},
}


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP metadata only: every global it names must be on the allow-list."""

    def __init__(self, file: io.BufferedIOBase, where: Path) -> None:
        super().__init__(file)
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        if name in _ALLOWED.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise CheckpointError(f"{self.where} names {module}.{name}, which checkpoint metadata never holds: "
                              "refusing to load it (it could run code); use a checkpoint this worldtune wrote")


class SafeReader(FileSystemReader):
    """A `FileSystemReader` whose metadata read cannot run code (see the module docstring)."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = Path(self._get_metadata_path(kwargs.get("rank")))
        try:
            with open(path, "rb") as f:
                metadata = _MetadataUnpickler(f, path).load()
        except CheckpointError:
            raise
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError) as e:
            raise CheckpointError(f"{path} cannot be read ({str(e)[:120] or type(e).__name__}): the sharded "
                                  "checkpoint is damaged") from None
        if not isinstance(metadata, Metadata):
            raise CheckpointError(f"{path} does not hold checkpoint metadata")
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class _SafeBytes:
    """Non-tensor items (optimizer hyperparameters, counters) through the weights-only unpickler."""

    def load_bytes(self, read_item, value: io.BytesIO) -> None:  # type: ignore[no-untyped-def]
        obj = torch.load(value, weights_only=True)
        fqn = read_item.dest_index.fqn
        if self.flatten_state_dict:
            from torch.distributed.checkpoint._traverse import set_element  # noqa: PLC0415

            set_element(self.original_state_dict, self.mappings[fqn], obj)
        else:
            self.state_dict[fqn] = obj


class SafeLoadPlanner(_SafeBytes, DefaultLoadPlanner):
    """`DefaultLoadPlanner` (load into a given state dict) without unsafe unpickling."""


class _SafeEmptyPlanner(_SafeBytes, _EmptyStateDictLoadPlanner):
    """Builds the state dict from the metadata (for offline consolidation), without unsafe unpickling."""


def safe_reader(dcp_dir: str | Path) -> SafeReader:
    """A reader for `dcp_dir` whose metadata was already read once here, so that a refusal is our
    one-line error (inside `dcp.load` it would come back wrapped in PyTorch's multi-rank report)."""
    reader = SafeReader(str(dcp_dir))
    reader.read_metadata()
    return reader


def load_full(dcp_dir: str | Path) -> dict[str, Any]:
    """The whole state dict of a sharded checkpoint, on CPU, in this one process."""
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict  # as dcp_to_torch_save does

    state: dict[str, Any] = {}
    _load_state_dict(state, storage_reader=safe_reader(dcp_dir), planner=_SafeEmptyPlanner(), no_dist=True)
    return state
