"""vLLM's `LLM.generate` on the tpu device against Hugging Face `generate` on the CPU
(`make test-vllm`, in the serving environment)."""

import gc
import random

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="the serving environment (make serve-env) has vLLM")
from vllm.config import CompilationMode  # noqa: E402

# Prompts of different lengths in one batch: prefill and decode of ragged requests.
PROMPTS = [
    "The quick brown fox",
    "Paged attention reads keys and values through a block table, one",
    "One, two",
    "vLLM serves",
]
NEW_TOKENS = 16


def hugging_face_greedy(path: str, prompts: list[str], new_tokens: int) -> list[list[int]]:
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    out = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        generated = model.generate(ids, max_new_tokens=new_tokens, do_sample=False)
        out.append(generated[0, ids.shape[1] :].tolist())
    return out


# The model compiled (the platform's default: torch.compile's "tpu" backend), and
# once eagerly (enforce_eager).
@pytest.fixture(
    scope="module",
    params=[("llama", False), ("qwen3", False), ("qwen3_moe", False), ("llama", True)],
    ids=["llama", "qwen3", "qwen3_moe", "llama-eager"],
)
def served(request, model_dir):
    arch, eager = request.param
    path = model_dir(arch)
    llm = vllm.LLM(model=path, dtype="float32", max_model_len=256, seed=0, enforce_eager=eager)
    compilation = llm.llm_engine.vllm_config.compilation_config
    assert compilation.mode == (
        CompilationMode.NONE if eager else CompilationMode.DYNAMO_TRACE_ONCE
    ), compilation.mode
    yield path, llm
    # The engine process holds the device: end it before the next model's.
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()


def test_greedy_tokens_equal_hugging_face(served):
    path, llm = served
    assert vllm.platforms.current_platform.device_type == "tpu"
    params = vllm.SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    got = [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS, params)]
    assert got == hugging_face_greedy(path, PROMPTS, NEW_TOKENS)


def test_seeded_sampling_repeats(served):
    _, llm = served
    params = vllm.SamplingParams(
        temperature=0.8, top_p=0.9, top_k=20, seed=1234, max_tokens=NEW_TOKENS, ignore_eos=True
    )
    first = [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS, params)]
    again = [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS, params)]
    assert first == again
    greedy = vllm.SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    assert first != [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS, greedy)]


def test_random_requests_compile_nothing(served):
    """After start-up, rounds of requests of random lengths (greedy, sampled with
    top-p and top-k, and both in one batch) compile no program: every program a
    step runs depends on padded sizes, and warm-up ran each combination."""
    _, llm = served
    words = "the quick brown fox jumps over lazy dog one two three four".split()
    rng = random.Random(0)
    greedy = dict(temperature=0)
    sampled = dict(temperature=0.8, top_p=0.9, top_k=20)
    before = llm.collective_rpc("tpu_metrics")
    for kinds in (
        [greedy],
        [greedy],
        [sampled],
        [sampled, dict(temperature=1.0)],
        [greedy, sampled],
    ):
        prompts = [
            " ".join(rng.choices(words, k=rng.randint(2, 40))) for _ in range(rng.randint(1, 6))
        ]
        max_tokens = rng.randint(4, 24)
        params = [vllm.SamplingParams(max_tokens=max_tokens, **rng.choice(kinds)) for _ in prompts]
        llm.generate(prompts, params, use_tqdm=False)
    after = llm.collective_rpc("tpu_metrics")
    assert [a["cache_misses"] - b["cache_misses"] for a, b in zip(after, before)] == [0]
