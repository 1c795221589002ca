"""A graph compiled by the ``"tpu"`` backend, in the form AOTAutograd's cache stores.

Imported only when the backend runs (it imports Inductor's OutputCode).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.output_code import OutputCode

from torch_tpu._compiled_graph import CompiledGraph


class GraphCode(OutputCode):
    """The ATen graph, pickled with GraphPickler when the cache saves it. Its programs
    are captured again on its first call in a new process, from the persistent
    compilation cache."""

    def __init__(self, gm: torch.fx.GraphModule):
        super().__init__()
        self._boxed_call = True
        self._graph: CompiledGraph | None = CompiledGraph(gm)
        self._pickled: bytes | None = None

    def __call__(self, inputs: list) -> Any:
        return self._graph(inputs)

    def prepare_for_serialization(self) -> None:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from torch.fx._graph_pickler import GraphPickler, Options

        # The cache saves under the compile's fake mode; the graph's real tpu tensor
        # constants (a `torch.tensor(...)` in the compiled code) pickle through a copy
        # to the host, which that mode would refuse.
        with unset_fake_temporarily():
            self._pickled = GraphPickler.dumps(self._graph.gm, Options(ops_filter=None))
        self._graph = None

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        if self._graph is not None:
            return
        from torch._guards import detect_fake_mode
        from torch._subclasses import FakeTensorMode
        from torch.fx._graph_pickler import GraphPickler

        from torch._subclasses.fake_tensor import unset_fake_temporarily

        fake_mode = detect_fake_mode(example_inputs) or FakeTensorMode()
        with unset_fake_temporarily():  # real constants go back to the device
            gm = GraphPickler.loads(self._pickled, fake_mode)
        gm.recompile()
        self._graph = CompiledGraph(gm)

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        pass
