"""The paged attention of a ragged batch (decodes and prefills of different context
lengths, rows grouped by context and cut into chunks) against attention computed
request by request, in float64 on the CPU. Each check runs in a process of its own:
a process that holds the tpu device keeps it, and the other tests' engines need it."""

import os
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

pytest.importorskip("vllm", reason="the serving environment (make serve-env) has vLLM")
from vllm_torch_tpu import attention

BLOCK, HEADS, KV_HEADS, HEAD = 16, 4, 2, 8
MAX_MODEL_LEN, CAPACITY = 256, 512
# (queries, sequence length) a request: decodes of short and long contexts, a
# one-token prompt, prefills of one and of several rows, a prefill chunk at the end of
# a long context, and enough decodes of one context bucket for two chunks.
REQUESTS = [(1, 5), (1, 70), (1, 200), (7, 7), (40, 100), (1, 1), (20, 255), (2, 66)]
REQUESTS += [(1, k) for k in range(3, 40, 3)]


def reference(q, memory, blocks, query_len, seq_len, window, scale):
    """Causal attention of one request's queries (the last of its context), float64."""
    slots = np.array([blocks[p // BLOCK] * BLOCK + p % BLOCK for p in range(seq_len)])
    kv = memory.reshape(-1, KV_HEADS, 2 * HEAD)[slots].double()
    k, v = kv.split(HEAD, dim=-1)
    k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
    v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.double().view(query_len, HEADS, HEAD), k) * scale
    position = torch.arange(seq_len - query_len, seq_len)[:, None]
    key = torch.arange(seq_len)[None, :]
    allowed = key <= position
    if window is not None:
        allowed &= key > position - window
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v)
    return out.reshape(query_len, HEADS * HEAD)


@pytest.mark.parametrize("window", [None, 24])
def test_ragged_batch_equals_attention_request_by_request(window):
    here = os.path.dirname(os.path.abspath(__file__))
    code = f"import sys; sys.path.insert(0, {here!r}); import test_attention; "
    code += f"test_attention.check_ragged_batch({window!r})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]


def check_ragged_batch(window):
    # Chunks of at most 8 rows at every context bucket: the 15 rows of one query of the
    # smaller bucket take two.
    attention.CHUNK_ELEMENTS = 8 * 64 * KV_HEADS * 2 * HEAD
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    per_request = -(-MAX_MODEL_LEN // BLOCK)
    num_blocks = 1 + per_request * len(REQUESTS)
    memory = torch.randn(num_blocks, BLOCK, KV_HEADS, 2 * HEAD)
    # Each request's blocks, shuffled; block 0 is the null block. Two padding requests.
    order = rng.permutation(np.arange(1, num_blocks))
    table = np.zeros((len(REQUESTS) + 2, per_request), dtype=np.int32)
    table[: len(REQUESTS)] = order.reshape(len(REQUESTS), per_request)
    query_lens = [q for q, _ in REQUESTS] + [0, 0]
    seq_lens = [s for _, s in REQUESTS] + [0, 0]
    starts = np.concatenate([[0], np.cumsum(query_lens)])
    tokens = int(starts[-1])
    padded = 1 << (tokens - 1).bit_length()
    query = torch.randn(padded, HEADS * HEAD)

    config = types.SimpleNamespace(
        model_config=types.SimpleNamespace(
            max_model_len=MAX_MODEL_LEN, get_num_attention_heads=lambda parallel: HEADS
        ),
        parallel_config=None,
        scheduler_config=types.SimpleNamespace(max_num_batched_tokens=CAPACITY),
    )
    spec = types.SimpleNamespace(block_size=BLOCK, num_kv_heads=KV_HEADS, head_size=HEAD)
    builder = attention.TpuAttentionMetadataBuilder(spec, [], config, torch.device("tpu"))
    builder.host_block_table = table
    metadata = builder.build(
        0,
        types.SimpleNamespace(
            query_start_loc_cpu=torch.from_numpy(starts),
            seq_lens_cpu_upper_bound=torch.tensor(seq_lens),
            num_reqs=len(query_lens),
            num_actual_tokens=padded,
            causal=True,
        ),
    )
    assert len([c for c in metadata.chunks if c.positions.shape[1] == 1]) == 3, [
        tuple(c.blocks.shape) for c in metadata.chunks
    ]

    scale = HEAD**-0.5
    impl = attention.TpuAttentionImpl(
        HEADS, HEAD, scale, num_kv_heads=KV_HEADS, sliding_window=window
    )
    # The cache as vLLM views it: [blocks, kv_heads, block_size, 2 * head_size].
    kv_cache = memory.to("tpu").permute(0, 2, 1, 3)
    output = torch.zeros(padded, HEADS * HEAD, device="tpu")
    impl.forward(None, query.to("tpu"), None, None, kv_cache, metadata, output)
    got = output.cpu()[:tokens]

    expected = torch.cat(
        [
            reference(query[starts[r] : starts[r + 1]], memory, table[r], q, s, window, scale)
            for r, (q, s) in enumerate(REQUESTS)
        ]
    )
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
