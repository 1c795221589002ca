"""Tensor parallelism 2 on the tpu device: vLLM's multiprocessing executor spawns a
worker a device, its collectives go through torch.distributed's `tpu_dist` backend
(staged through Gloo between the CPU platform's processes). Greedy tokens against
Hugging Face `generate` on the CPU."""

import fcntl
import os
import time

import pytest

vllm = pytest.importorskip("vllm", reason="the serving environment (make serve-env) has vLLM")
from vllm.config import CompilationMode  # noqa: E402

from test_generate import NEW_TOKENS, PROMPTS, hugging_face_greedy  # noqa: E402

import torch_tpu  # noqa: E402

TP = 2
# Where devices are lock files named by host device (LOCAL_RANK picks the worker's).
CPU_PLATFORM = torch_tpu.platform() == "cpu"


def lock_holder(lock_dir: str, device: int) -> int | None:
    """The process holding the CPU platform's host device `device`, None when free."""
    path = os.path.join(lock_dir, f"torch_tpu-cpu-{device}.lock")
    if not os.path.exists(path):
        return None
    with open(path, "r+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return int(f.read().strip() or 0)
        fcntl.flock(f, fcntl.LOCK_UN)
        return None


def command_line(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode().strip()


# Compiled (the platform's default) and eager (enforce_eager).
@pytest.fixture(scope="module", params=[False, True], ids=["compiled", "eager"])
def served(request, model_dir, tmp_path_factory):
    eager = request.param
    path = model_dir("llama")  # 4 heads, 2 KV heads: 2 and 1 a worker
    # Locks of their own: the workers' host devices 0 and 1, whatever else runs here.
    lock_dir = str(tmp_path_factory.mktemp("locks"))
    env = pytest.MonkeyPatch()
    env.setenv("TORCH_TPU_LOCK_DIR", lock_dir)
    llm = vllm.LLM(
        model=path,
        dtype="float32",
        max_model_len=256,
        seed=0,
        tensor_parallel_size=TP,
        enforce_eager=eager,
    )
    try:
        config = llm.llm_engine.vllm_config
        assert config.parallel_config.distributed_executor_backend == "mp"
        assert config.compilation_config.mode == (
            CompilationMode.NONE if eager else CompilationMode.DYNAMO_TRACE_ONCE
        )
        yield path, llm, lock_dir
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        env.undo()
    # The workers end with the engine: their devices are free for the next test.
    if not CPU_PLATFORM:
        return
    deadline = time.monotonic() + 30
    while any(lock_holder(lock_dir, d) for d in range(TP)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [lock_holder(lock_dir, d) for d in range(TP)] == [None] * TP


def test_greedy_tokens_equal_hugging_face(served):
    path, llm, _ = served
    params = vllm.SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    before = llm.collective_rpc("tpu_metrics")
    got = [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS, params)]
    after = llm.collective_rpc("tpu_metrics")
    assert got == hugging_face_greedy(path, PROMPTS, NEW_TOKENS)

    # Each model step all-reduces the embedding and, per layer, the attention's and
    # the MLP's outputs; the logits are gathered. A compiled model runs the
    # all-reduce (vLLM's opaque custom op) at every step, not once at tracing.
    layers = 2
    per_step = 1 + 2 * layers + 1
    for b, a in zip(before, after):
        staged = a["staged_collectives"] - b["staged_collectives"]
        assert staged >= NEW_TOKENS * per_step, staged
        assert a["program_collectives"] == b["program_collectives"]


def test_one_device_a_worker(served):
    _, _, lock_dir = served
    # The front end holds no device; worker r holds host device r (its LOCAL_RANK).
    assert not torch_tpu._C._is_started()
    if not CPU_PLATFORM:
        pytest.skip("host devices by LOCAL_RANK are the CPU platform's")
    holders = [lock_holder(lock_dir, d) for d in range(TP)]
    assert all(holders) and len(set(holders)) == TP and os.getpid() not in holders
    for rank, pid in enumerate(holders):
        assert command_line(pid).endswith(f"Worker_TP{rank}"), command_line(pid)
