"""Tiny models built here (nothing is downloaded): a byte-level BPE tokenizer
trained on a few sentences and randomly initialised weights, saved as Hugging Face
checkpoints that `LLM(model=dir)` and `transformers` both load."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TORCH_TPU_PRECISION", "HIGHEST")

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "vLLM serves large language models; torch_tpu runs PyTorch on TPUs.",
    "Paged attention reads keys and values through a block table.",
    "One, two, three, four, five, six, seven, eight, nine, ten.",
] * 20


def save_tokenizer(path: str) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=256,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    # For /v1/chat/completions: each message's content on a line of its own.
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    fast.save_pretrained(path)


def save_model(path: str, arch: str, **sizes) -> None:
    """A tiny `arch` model of random weights; `sizes` override its config's sizes."""
    import torch
    import transformers

    common = dict(
        vocab_size=384,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    common.update(sizes)
    if arch == "llama":
        config = transformers.LlamaConfig(**common)
        cls = transformers.LlamaForCausalLM
    elif arch == "qwen3":
        config = transformers.Qwen3Config(head_dim=16, **common)
        cls = transformers.Qwen3ForCausalLM
    elif arch == "qwen3_moe":
        config = transformers.Qwen3MoeConfig(
            head_dim=16, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, **common
        )
        cls = transformers.Qwen3MoeForCausalLM
    else:
        raise ValueError(arch)
    torch.manual_seed(0)
    model = cls(config)
    # Random weights of a larger scale than the initialiser's, so that greedy
    # tokens are not all one token.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.15)
    model.save_pretrained(path)
    save_tokenizer(path)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    cache = {}

    def make(arch: str) -> str:
        if arch not in cache:
            path = str(tmp_path_factory.mktemp(arch))
            save_model(path, arch)
            cache[arch] = path
        return cache[arch]

    return make
