"""vLLM's GPU model runner on the tpu device: the same batching, scheduling and
sampling, with every program of a step at a few padded sizes (compiled at start-up):
inputs prepared on the host (the KV slots too, which vLLM maps with a Triton kernel)
and uploaded as whole buffers, requests and tokens padded to buckets."""

from __future__ import annotations

import contextlib
import dataclasses
import time

import numpy as np
import torch
import torch_tpu
from vllm.logger import init_logger
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import NewRequestData, SchedulerOutput
from vllm.v1.outputs import SamplerOutput
from vllm.v1.sample.logits_processor.builtin import (
    LogitBiasLogitsProcessor,
    MinPLogitsProcessor,
    MinTokensLogitsProcessor,
)
from vllm.v1.worker.gpu_model_runner import NULL_BLOCK_ID, GPUModelRunner
from vllm.v1.worker.utils import allocate_kv_cache, bind_kv_cache, map_kv_caches_to_kernel_blocks

from vllm_torch_tpu import moe  # noqa: F401  (registers the experts and routing ops)
from vllm_torch_tpu.attention import TpuAttentionMetadataBuilder, bucket

logger = init_logger(__name__)

# vLLM's slot for a token whose key and value are not stored (padding).
PAD_SLOT_ID = -1
# The fewest tokens a batch is padded to.
MIN_PADDED_TOKENS = 16
# A batch of at most this many requests is padded to this many (or its token
# bucket, if fewer); a larger one to its token bucket.
FEW_REQUESTS = 16
# The InputBatch's per-request sampling values (device buffers with host twins).
SAMPLING_VALUES = (
    "temperature", "top_p", "top_k", "frequency_penalties", "presence_penalties",
    "repetition_penalties",
)  # fmt: skip


def allocate_kv_cache_per_layer(kv_cache_config, device, layout, kernel_block_sizes=None):
    """vLLM's KV cache views, each layer in a tensor of its own dtype.

    vLLM places every layer in one int8 allocation and views it by dtype; a tpu
    program that reads such a view reads the whole allocation (gigabytes, each
    op). The layers' shapes and memory orders are vLLM's, laid out on the meta
    device."""
    views = allocate_kv_cache(kv_cache_config, torch.device("meta"), layout, kernel_block_sizes)
    own: dict[int, torch.Tensor] = {}  # layers that shared a view still share one
    caches = {}
    for name, view in views.items():
        if id(view) not in own:
            order = sorted(range(view.dim()), key=lambda d: -view.stride(d))
            stored = torch.zeros([view.shape[d] for d in order], dtype=view.dtype, device=device)
            own[id(view)] = stored.permute([order.index(d) for d in range(view.dim())])
        caches[name] = own[id(view)]
    return caches


class TpuModelRunner(GPUModelRunner):
    """Every program a serving step runs depends on a few sizes: the batch's token
    count padded to a bucket (`token_buckets`) and the request count padded to a
    function of it (`_padded_reqs`). Inputs are prepared on the host and uploaded as
    whole buffers (a transfer, no program); `warm_up` runs a batch of each
    combination, so that serving compiles nothing."""

    def __init__(self, vllm_config, device: torch.device):
        super().__init__(vllm_config, device)
        for feature, used in (
            ("speculative decoding", self.speculative_config is not None),
            ("LoRA", self.lora_config is not None),
            ("multimodal inputs", self.supports_mm_inputs),
            ("M-RoPE", self.uses_mrope),
            ("prompt embeddings", self.enable_prompt_embeds),
            ("async scheduling", self.use_async_scheduling),
        ):
            if used:
                raise NotImplementedError(f"{feature} is not supported on tpu")
        self._positions_cpu = torch.zeros(self.max_num_tokens, dtype=torch.int64)
        self._is_padding_cpu = torch.zeros(self.max_num_tokens, dtype=torch.bool)
        self._adapt_input_batch()

    def _adapt_input_batch(self) -> None:
        # The per-request sampling values vLLM copies into slices of device buffers
        # (a program a request count) stay on the host: the buffers are their host
        # twins, and _sample uploads them padded.
        batch = self.input_batch
        for name in SAMPLING_VALUES:
            setattr(batch, name, getattr(batch, f"{name}_cpu_tensor"))
        batch.refresh_metadata()

    def may_reinitialize_input_batch(self, *args, **kwargs):
        super().may_reinitialize_input_batch(*args, **kwargs)
        self._adapt_input_batch()

    def _padded_tokens(self, num_tokens: int) -> int:
        return min(bucket(max(num_tokens, MIN_PADDED_TOKENS)), self.max_num_tokens)

    def _padded_reqs(self, num_tokens_padded: int, num_reqs: int) -> int:
        """The requests a batch of num_tokens_padded tokens is padded to: FEW_REQUESTS
        (a prefill or a small batch), else as many as its tokens, so that the
        attention, logits and sampler have two sizes a token bucket."""
        few = min(num_tokens_padded, FEW_REQUESTS, self.max_num_reqs)
        return few if num_reqs <= few else min(num_tokens_padded, self.max_num_reqs)

    def _determine_batch_execution_and_padding(self, num_tokens: int, num_reqs: int, *a, **kw):
        mode, batch, *rest = super()._determine_batch_execution_and_padding(
            num_tokens, num_reqs, *a, **kw
        )
        num_tokens_padded = self._padded_tokens(batch.num_tokens)
        batch = dataclasses.replace(
            batch,
            num_tokens=num_tokens_padded,
            num_reqs=self._padded_reqs(num_tokens_padded, batch.num_reqs or num_reqs),
        )
        return (mode, batch, *rest)

    def _build_attention_metadata(self, *args, **kwargs):
        # The attention's batch padded as the runner's (vLLM pads it only for full
        # CUDA graphs); _prepare_inputs has set the padding requests' rows (no query,
        # no context, the null block), so vLLM has none to fill (a program a size).
        tokens = kwargs.get("num_tokens_padded") or self._padded_tokens(kwargs["num_tokens"])
        reqs = kwargs.get("num_reqs_padded") or self._padded_reqs(tokens, kwargs["num_reqs"])
        kwargs.update(num_tokens_padded=tokens, num_reqs_padded=reqs, num_reqs=reqs)
        # The attention lays its batch out on the host, from the host's block tables.
        for gid, groups in enumerate(self.attn_groups):
            for group in groups:
                for builder in group.metadata_builders:
                    if isinstance(builder, TpuAttentionMetadataBuilder):
                        builder.host_block_table = self.input_batch.block_table[gid].block_table.np
        return super()._build_attention_metadata(*args, **kwargs)

    def _get_slot_mappings(self, num_tokens_padded: int, *args, **kwargs):
        # _prepare_inputs has written the padding tokens' slots (-1).
        kwargs["num_tokens_unpadded"] = num_tokens_padded
        return super()._get_slot_mappings(num_tokens_padded, *args, **kwargs)

    def _prepare_padding_mask(self, num_tokens_unpadded: int, num_tokens_padded: int):
        self._is_padding_cpu[:num_tokens_unpadded] = False
        self._is_padding_cpu[num_tokens_unpadded:] = True
        self.is_padding.copy_(self._is_padding_cpu)
        return self.is_padding[:num_tokens_padded]

    def _prepare_inputs(self, scheduler_output, num_scheduled_tokens: np.ndarray):
        """vLLM's input preparation on the host: input ids, positions, query starts,
        sequence lengths, block tables and KV slots, each buffer uploaded whole (the
        padding zero, its slots -1). Returns the logits' rows, one a padded request
        (the padding's: row 0)."""
        batch = self.input_batch
        num_tokens = scheduler_output.total_num_scheduled_tokens
        num_reqs = batch.num_reqs
        assert num_tokens > 0 and num_reqs > 0
        num_reqs_padded = self._padded_reqs(self._padded_tokens(num_tokens), num_reqs)

        req_indices = np.repeat(self.arange_np[:num_reqs], num_scheduled_tokens)
        cu_num_tokens = self._get_cumsum_and_arange(num_scheduled_tokens, self.query_pos.np)
        positions = batch.num_computed_tokens_cpu[req_indices] + self.query_pos.np[:num_tokens]

        token_indices = positions + req_indices * batch.token_ids_cpu.shape[1]
        self.input_ids.np[:num_tokens] = batch.token_ids_cpu.reshape(-1)[token_indices]
        self.input_ids.np[num_tokens:] = 0
        self.input_ids.copy_to_gpu()
        positions_cpu = self._positions_cpu.numpy()
        positions_cpu[:num_tokens] = positions
        positions_cpu[num_tokens:] = 0
        self.positions.copy_(self._positions_cpu)

        self.query_start_loc.np[0] = 0
        self.query_start_loc.np[1 : num_reqs + 1] = cu_num_tokens
        self.query_start_loc.np[num_reqs + 1 :] = cu_num_tokens[-1]
        self.query_start_loc.copy_to_gpu()

        seq_lens = self.optimistic_seq_lens_cpu
        torch.add(
            batch.num_computed_tokens_cpu_tensor[:num_reqs],
            torch.from_numpy(num_scheduled_tokens),
            out=seq_lens[:num_reqs],
        )
        seq_lens[num_reqs:] = 0
        self.seq_lens.copy_(seq_lens)
        computed = batch.num_computed_tokens_cpu_tensor[: self.max_num_reqs].clone()
        computed[num_reqs:] = 0
        self.num_computed_tokens.copy_(computed)
        self.num_scheduled_tokens.np[:num_reqs] = num_scheduled_tokens
        self.num_scheduled_tokens.np[num_reqs:] = 0

        # Requests whose sampled token is dropped (a prefill chunk short of its end).
        total = np.array([self.requests[r].num_tokens for r in batch.req_ids], dtype=np.int32)
        self.discard_request_mask.np[:num_reqs] = seq_lens[:num_reqs].numpy() < total
        self.discard_request_mask.np[num_reqs:] = False
        self.discard_request_mask.copy_to_gpu()

        for table in batch.block_table.block_tables:
            blocks = table.block_table.np
            blocks[num_reqs:] = NULL_BLOCK_ID
            table.block_table.copy_to_gpu()
            slots = table.slot_mapping.np
            size = table.block_size
            slots[:num_tokens] = blocks[req_indices, positions // size] * size + positions % size
            slots[num_tokens:] = PAD_SLOT_ID
            table.slot_mapping.copy_to_gpu()

        logits_indices = np.zeros(num_reqs_padded, dtype=np.int64)
        logits_indices[:num_reqs] = cu_num_tokens - 1
        return torch.from_numpy(logits_indices).to(self.device), None, 1

    def _preprocess(self, scheduler_output, num_input_tokens: int, *args, **kwargs):
        # vLLM zeroes the padding's positions on the device (a program a size);
        # _prepare_inputs has.
        scheduler_output = dataclasses.replace(
            scheduler_output, total_num_scheduled_tokens=num_input_tokens
        )
        return super()._preprocess(scheduler_output, num_input_tokens, *args, **kwargs)

    def _sample(self, logits, spec_decode_metadata):
        """vLLM's sampler over the padded requests' logits (the padding's rows
        sampled and dropped), as one DeferAndFuse program a request bucket; the
        tokens come back to the host. Penalties, logprobs, allowed or bad words and
        min-p run vLLM's sampler on the batch's own rows (programs at its sizes)."""
        assert spec_decode_metadata is None
        batch = self.input_batch
        num_reqs, rows = batch.num_reqs, logits.shape[0]
        metadata = batch.sampling_metadata  # its tensors on the host
        self.input_batch.update_async_output_token_ids()
        if not padded_sampling_covers(metadata):
            with torch_tpu.eager_mode("defer_and_fuse"):
                return self.sampler(
                    logits=logits[:num_reqs],
                    sampling_metadata=on_device(metadata, self.device),
                )

        def padded(values: torch.Tensor | None, fill) -> torch.Tensor:
            out = torch.full((rows,), fill, dtype=values.dtype)
            out[:num_reqs] = values
            return out.to(self.device)

        if not metadata.all_greedy:
            # Greedy rows among sampled ones as vLLM's mixed batches; top-k and
            # top-p always applied (k = vocabulary, p = 1 keep every token), so
            # that a request bucket has one sampler program.
            vocab = batch.vocab_size
            metadata = dataclasses.replace(
                metadata,
                all_random=False,
                temperature=padded(metadata.temperature, 1.0),
                top_k=padded(batch.top_k_cpu_tensor[:num_reqs], vocab),
                top_p=padded(batch.top_p_cpu_tensor[:num_reqs], 1.0),
            )
        with torch_tpu.eager_mode("defer_and_fuse"):
            out = self.sampler(logits=logits, sampling_metadata=metadata)
        return SamplerOutput(
            sampled_token_ids=out.sampled_token_ids.cpu()[:num_reqs], logprobs_tensors=None
        )

    def initialize_kv_cache_tensors(
        self, kv_cache_config, kernel_block_sizes, kv_cache_allocation_context=None
    ) -> dict[str, torch.Tensor]:
        """vLLM's, with each layer's cache a tensor of its own
        (`allocate_kv_cache_per_layer`)."""
        with kv_cache_allocation_context or contextlib.nullcontext():
            kv_caches = allocate_kv_cache_per_layer(
                kv_cache_config,
                self.device,
                self.cache_config.get_resolved_kv_cache_layout(),
                kernel_block_sizes,
            )
        for layer_name, target_layer_name in self.shared_kv_cache_layers.items():
            kv_caches[layer_name] = kv_caches[target_layer_name]
        longcat = self.model_config.hf_config.model_type == "longcat_flash"
        attn_groups = [g for groups in self.attn_groups for g in groups]
        bind_kv_cache(
            kv_caches,
            self.compilation_config.static_forward_context,
            self.kv_caches,
            2 if longcat else 1,  # attention modules a layer
            kv_cache_groups=kv_cache_config.kv_cache_groups,
            layer_kv_caches=map_kv_caches_to_kernel_blocks(kv_caches, attn_groups),
        )
        return kv_caches

    def token_buckets(self) -> list[int]:
        """The token counts batches are padded to."""
        sizes, n = [], MIN_PADDED_TOKENS
        while n < self.max_num_tokens:
            sizes.append(n)
            n *= 2
        return sizes + [self.max_num_tokens]

    def warm_up_batches(self) -> list[tuple[list[int], list[int]]]:
        """A batch (query lengths, sequence lengths) of each token bucket and request
        padding (`_padded_reqs`) serving can meet. (The attention's program depends
        on the token bucket alone.)"""
        # A request samples a token: its sequence stays below max_model_len.
        max_len, max_reqs = self.max_model_len - 1, self.max_num_reqs
        batches = {}
        for padded in self.token_buckets():
            # The fewest tokens padded to this bucket.
            low = padded // 2 + 1 if padded > MIN_PADDED_TOKENS else 1
            for reqs in sorted({1, FEW_REQUESTS, FEW_REQUESTS + 1, low, padded, max_reqs}):
                if not 1 <= reqs <= min(max_reqs, padded):
                    continue
                # Decodes, and prefills (of at most max_len tokens) to fill the bucket.
                query = [1] * reqs
                if reqs < low:
                    query = query[1:] + split_tokens(low - (reqs - 1), max_len)
                if len(query) > max_reqs or not low <= sum(query) <= padded:
                    continue
                shape = (self._padded_tokens(sum(query)), self._padded_reqs(padded, len(query)))
                batches.setdefault(shape, (query, list(query)))
        return list(batches.values())

    def _warm_up_step(self, query_lens: list[int], seq_lens: list[int], sampling) -> None:
        """Runs a batch of new requests (their blocks the null block) through
        execute_model and sample_tokens, then ends them."""
        groups = self.kv_cache_config.kv_cache_groups
        step = SchedulerOutput.make_empty()
        for i, (query, seq) in enumerate(zip(query_lens, seq_lens)):
            req_id = f"tpu-warm-up-{i}"
            blocks = tuple([NULL_BLOCK_ID] * -(-seq // g.kv_cache_spec.block_size) for g in groups)
            step.scheduled_new_reqs.append(
                NewRequestData(
                    req_id=req_id,
                    prompt_token_ids=[0] * seq,
                    mm_features=[],
                    sampling_params=sampling,
                    pooling_params=None,
                    block_ids=blocks,
                    num_computed_tokens=seq - query,
                    lora_request=None,
                )
            )
            step.num_scheduled_tokens[req_id] = query
        step.total_num_scheduled_tokens = sum(query_lens)
        self.execute_model(step)
        self.sample_tokens(None)
        end = SchedulerOutput.make_empty()
        end.finished_req_ids = set(step.num_scheduled_tokens)
        self.execute_model(end)

    def warm_up(self) -> None:
        """Runs the batches of `warm_up_batches`, greedy, and one a request bucket
        sampled (temperature, top-k, top-p), so that serving starts with every program
        compiled."""
        start = time.perf_counter()
        greedy = SamplingParams(temperature=0.0, max_tokens=1)
        sampled = SamplingParams(temperature=0.8, top_p=0.9, top_k=20, max_tokens=1)
        sampled_reqs = set()
        batches = self.warm_up_batches()
        for query, seq in batches:
            self._warm_up_step(query, seq, greedy)
            reqs = self._padded_reqs(self._padded_tokens(sum(query)), len(query))
            if reqs not in sampled_reqs and not self.is_pooling_model:
                sampled_reqs.add(reqs)
                self._warm_up_step(query, seq, sampled)
        torch.tpu.synchronize(self.device)
        logger.info("warm-up: %d batches in %.1f s", len(batches), time.perf_counter() - start)

    def _sync_device(self) -> None:
        torch.tpu.synchronize(self.device)


def split_tokens(total: int, most: int) -> list[int]:
    """total tokens as prefills (two queries or more) of at most `most` each, as even
    as can be; [] if none."""
    count = -(-total // most)
    if total < 2 or most < 2 or total < 2 * count:
        return []
    return [total // count + (i < total % count) for i in range(count)]


def padded_sampling_covers(metadata) -> bool:
    """Whether the padded sampler serves these requests: none with penalties,
    logprobs, allowed or bad words, min-p or a logits processor of its own."""
    if not (
        metadata.no_penalties
        and metadata.allowed_token_ids_mask is None
        and not metadata.bad_words_token_ids
        and metadata.max_num_logprobs is None
        and not metadata.logprob_token_ids
    ):
        return False
    for processor in metadata.logitsprocs.all:
        if isinstance(processor, MinPLogitsProcessor):
            if processor.min_p_count:
                return False
        elif not isinstance(processor, (LogitBiasLogitsProcessor, MinTokensLogitsProcessor)):
            return False
    return True


def on_device(metadata, device: torch.device):
    """The sampling metadata with its host tensors uploaded (whole, no program)."""
    fields = {}
    for name in SAMPLING_VALUES:
        value = getattr(metadata, name)
        if value is not None:
            fields[name] = value.to(device)
    return dataclasses.replace(metadata, **fields)
