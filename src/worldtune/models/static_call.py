"""A module call on fixed input buffers, captured as a CUDA graph on CUDA and replayed at every later call.

A small model's denoising step is bound by kernel launches: the forward-dynamics chunk `worldtune serve` runs per
policy step makes ~35 transformer calls of ~2,300 tokens, each a few thousand kernels. A CUDA graph launches them
all at once. Graphs replay on the memory they were captured with, so every input is copied into a buffer kept per
input signature (the shapes, dtypes and the non-tensor arguments), and the outputs are copied out before the next
replay can overwrite them.

Off CUDA the same buffers are used and the call runs eagerly, so the CPU tests exercise every copy the graph path
depends on (a stale buffer gives a stale answer on both). A capture that fails (an operation CUDA graphs cannot
record) is reported once and that signature runs eagerly from then on.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree


@dataclass
class _Entry:
    """One input signature: its input buffers, and (on CUDA) its graph and output buffers."""

    spec: Any
    inputs: list[Any]  # leaves: a tensor buffer, or the non-tensor value itself
    graph: Any = None
    outputs: Any = None
    failed: str | None = None
    calls: int = field(default=0)


def _signature(leaves: list[Any], spec: Any) -> tuple:
    """What a buffer set is valid for: every tensor's shape, dtype and device, every other leaf's value."""
    parts = tuple((tuple(x.shape), x.dtype, x.device) if isinstance(x, torch.Tensor) else ("v", x) for x in leaves)
    return (str(spec), parts)


def _clone(tree: Any) -> Any:
    return pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)


class StaticCall:
    """`fn(**kwargs)` on buffers kept per input signature; with `graphs`, each signature is captured once as a CUDA
    graph (after `warmup` eager calls on a side stream) and replayed after its inputs are copied in.

    Why the buffers exist on the CPU too: so that the path a graph depends on (copy in, call on the buffers,
    copy out) is the path the tests run."""

    def __init__(self, fn: Callable[..., Any], graphs: bool, warmup: int = 1) -> None:
        self.fn, self.graphs, self.warmup = fn, graphs, warmup
        self._entries: dict[tuple, _Entry] = {}
        self._pool = None

    @property
    def captured(self) -> int:
        """Signatures running as CUDA graphs."""
        return sum(e.graph is not None for e in self._entries.values())

    def __call__(self, **kwargs: Any) -> Any:
        leaves, spec = pytree.tree_flatten(kwargs)
        key = _signature(leaves, spec)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(spec, [x.clone() if isinstance(x, torch.Tensor) else x
                                                       for x in leaves])
        else:
            for buf, x in zip(entry.inputs, leaves):
                if isinstance(buf, torch.Tensor):
                    buf.copy_(x)
        entry.calls += 1
        if self.graphs and entry.graph is None and entry.failed is None:
            self._capture(entry)
        if entry.graph is not None:
            entry.graph.replay()
            return _clone(entry.outputs)
        return self.fn(**pytree.tree_unflatten(entry.inputs, entry.spec))

    def _capture(self, entry: _Entry) -> None:
        """Warm up on a side stream, then record one call into a graph sharing this object's memory pool (the
        graphs never run at once, and each one's outputs stay referenced, so sharing the pool is safe)."""
        kwargs = pytree.tree_unflatten(entry.inputs, entry.spec)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                self.fn(**kwargs)
        torch.cuda.current_stream().wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self._pool):
                outputs = self.fn(**kwargs)
        except Exception as e:  # noqa: BLE001 -- an operation graphs cannot record: this signature stays eager
            entry.failed = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            print(f"note: CUDA graph capture failed ({entry.failed}); running this shape eagerly", file=sys.stderr)
            torch.cuda.synchronize()
            return
        entry.graph, entry.outputs = graph, outputs
