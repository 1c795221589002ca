"""Checks on data the CPU makes before computing (indices in range, valid probabilities):
on tpu the program computes them and the engine raises the CPU's exception at the next
point where the host waits (`.cpu()`, `.item()`, `synchronize()`), naming the op; the debug
eager mode raises at the op. No op waits for its check, and the device stays usable."""

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

MODES = ["strict", "defer_and_fuse", "debug"]

# op(weight of 5 rows x 3, index tensor) -> result; the index 7 is out of range.
INDEXING = {
    "embedding": lambda w, i: F.embedding(i, w),
    "index_select": lambda w, i: w.index_select(0, i),
    "gather": lambda w, i: w.gather(0, i.reshape(-1, 1).expand(-1, 3)),
    "index": lambda w, i: w[i],
    "index_put": lambda w, i: w.clone().index_put_((i,), torch.tensor(1.0, device=w.device)),
    "scatter": lambda w, i: w.clone().scatter_(0, i.reshape(-1, 1).expand(-1, 3), 1.0),
    "scatter_add": lambda w, i: w.clone().scatter_add_(0, i.reshape(-1, 1).expand(-1, 3), w[:2]),
    "scatter_reduce": lambda w, i: w.clone().scatter_reduce(
        0, i.reshape(-1, 1).expand(-1, 3), w[:2], "amax"
    ),
    "index_add": lambda w, i: w.clone().index_add_(0, i, w[:2]),
    "index_copy": lambda w, i: w.clone().index_copy_(0, i, w[:2]),
    "index_fill": lambda w, i: w.clone().index_fill_(0, i, 2.0),
    "take": lambda w, i: w.take(i * 3),
    "put": lambda w, i: w.clone().put_(i * 3, w[0, :2]),
    "nll_loss": lambda w, i: F.nll_loss(w[:2].log_softmax(1), i),
    "cross_entropy": lambda w, i: F.cross_entropy(w[:2], i),
    "nll_loss_backward": lambda w, i: torch.ops.aten.nll_loss_backward(
        w.new_tensor(1.0), w[:2].log_softmax(1), i, None, 1, -100, w.new_tensor(2.0)
    ),
    "embedding_bag_max": lambda w, i: F.embedding_bag(i, w, i.new_zeros(1), mode="max"),
    "embedding_bag_sum": lambda w, i: F.embedding_bag(i, w.double(), i.new_zeros(1)),
    "embedding_renorm_": lambda w, i: torch.embedding_renorm_(w.clone(), i, 1.0, 2.0),
    "multi_margin_loss": lambda w, i: F.multi_margin_loss(w[:2], i),
    "multilabel_margin_loss": lambda w, i: F.multilabel_margin_loss(
        w[:2], torch.cat([i, i[:1]]).expand(2, 3)
    ),
    "max_unpool2d": lambda w, i: torch.ops.aten.max_unpool2d(
        w[0, :2].reshape(1, 1, 1, 2), i.reshape(1, 1, 1, 2), [2, 3]
    ),
    "searchsorted_sorter": lambda w, i: torch.searchsorted(w[0, :2], w[1], sorter=i - 1),
    "lu_unpack": lambda w, i: torch.lu_unpack(w[:2, :2], i.int())[0],
    "lu_solve": lambda w, i: torch.linalg.lu_solve(
        w[:2, :2] + 4 * torch.eye(2, device=w.device), i.int(), w[:2, :1]
    ),
}

# op(device) with invalid data, and the same with valid data.
VALUES = {
    "multinomial_negative": (
        lambda d: torch.multinomial(torch.tensor([1.0, -1.0, 1.0], device=d), 1),
        lambda d: torch.multinomial(torch.tensor([0.0, 1.0, 0.0], device=d), 1),
    ),
    "multinomial_zero": (
        lambda d: torch.multinomial(torch.zeros(2, 3, device=d), 1),
        lambda d: torch.multinomial(torch.tensor([[0.0, 0.0, 2.0]] * 2, device=d), 1),
    ),
    "bernoulli": (
        lambda d: torch.bernoulli(torch.tensor([2.0, 0.5], device=d)),
        lambda d: torch.bernoulli(torch.tensor([1.0, 0.0], device=d)),
    ),
    "bernoulli_inplace": (
        lambda d: torch.zeros(2, device=d).bernoulli_(torch.tensor([-0.5, 0.5], device=d)),
        lambda d: torch.zeros(2, device=d).bernoulli_(torch.tensor([0.0, 1.0], device=d)),
    ),
    "binary_cross_entropy": (
        lambda d: F.binary_cross_entropy(torch.tensor([1.5], device=d), torch.ones(1, device=d)),
        lambda d: F.binary_cross_entropy(torch.tensor([0.5], device=d), torch.ones(1, device=d)),
    ),
    "embedding_bag_first_offset": (
        lambda d: F.embedding_bag(
            torch.tensor([1, 2], device=d), torch.ones(5, 3, device=d), torch.tensor([1], device=d)
        ),
        lambda d: F.embedding_bag(
            torch.tensor([1, 2], device=d), torch.ones(5, 3, device=d), torch.tensor([0], device=d)
        ),
    ),
    "embedding_bag_last_offset": (
        lambda d: F.embedding_bag(
            torch.tensor([1, 2], device=d),
            torch.ones(5, 3, device=d),
            torch.tensor([0, 3], device=d),
        ),
        lambda d: F.embedding_bag(
            torch.tensor([1, 2], device=d),
            torch.ones(5, 3, device=d),
            torch.tensor([0, 2], device=d),
        ),
    ),
    "segment_reduce_negative_length": (
        lambda d: torch.segment_reduce(
            torch.ones(5, device=d), "sum", lengths=torch.tensor([7, -2], device=d)
        ),
        lambda d: torch.segment_reduce(
            torch.ones(5, device=d), "sum", lengths=torch.tensor([3, 2], device=d)
        ),
    ),
    "segment_reduce_lengths_sum": (
        lambda d: torch.segment_reduce(
            torch.ones(5, device=d), "sum", lengths=torch.tensor([3, 3], device=d)
        ),
        lambda d: torch.segment_reduce(
            torch.ones(5, device=d), "sum", lengths=torch.tensor([3, 2], device=d)
        ),
    ),
    "masked_scatter": (
        lambda d: torch.zeros(3, device=d).masked_scatter(
            torch.tensor([True, True, True], device=d), torch.ones(2, device=d)
        ),
        lambda d: torch.zeros(3, device=d).masked_scatter(
            torch.tensor([True, False, True], device=d), torch.ones(2, device=d)
        ),
    ),
}


def expect_like_the_cpu(mode, cpu_call, tpu_call):
    """The tpu call raises the CPU's exception: at the op in debug mode, else at the
    next synchronisation; its message starts with the CPU's and names an ATen op."""
    with pytest.raises((IndexError, RuntimeError)) as cpu:
        cpu_call()
    with torch_tpu.eager_mode(mode):
        with pytest.raises(cpu.type) as tpu:
            result = tpu_call()
            if mode == "debug":
                pytest.fail("debug mode did not raise at the op")
            result.cpu()
    message = str(tpu.value)
    assert message.startswith(str(cpu.value).splitlines()[0]), message
    assert "(aten::" in message and "checked on the tpu device" in message


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", INDEXING)
def test_out_of_range_indices_raise_like_the_cpu(op, mode):
    fn = INDEXING[op]
    w = torch.randn(5, 3)
    bad = torch.tensor([1, 7])
    expect_like_the_cpu(mode, lambda: fn(w, bad), lambda: fn(w.to("tpu"), bad.to("tpu")))
    # The device is still usable, and valid indices give the CPU's result.
    good = torch.tensor([1, 2])
    with torch_tpu.eager_mode(mode):
        torch.testing.assert_close(fn(w.to("tpu"), good.to("tpu")).cpu(), fn(w, good))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", VALUES)
def test_invalid_values_raise_like_the_cpu(case, mode):
    invalid, valid = VALUES[case]
    expect_like_the_cpu(mode, lambda: invalid("cpu"), lambda: invalid("tpu"))
    with torch_tpu.eager_mode(mode):
        torch.testing.assert_close(valid("tpu").cpu(), valid("cpu"))


@torch_tpu.eager_mode("strict")
def test_checks_wait_for_nothing_until_the_host_reads():
    w = torch.randn(50, 8, device="tpu")
    i = torch.randint(0, 50, (16,), device="tpu")
    F.embedding(i, w).sum().cpu()  # compiled, and any earlier code read
    before = torch_tpu.metrics()["device_to_host_transfers"]
    total = torch.zeros(8, device="tpu")
    for _ in range(20):
        total += F.embedding(i, w).sum(0)
    assert torch_tpu.metrics()["device_to_host_transfers"] == before
    total.cpu()  # the values and the error code of the 20 lookups, once
    assert torch_tpu.metrics()["device_to_host_transfers"] == before + 2


@torch_tpu.eager_mode("strict")
def test_the_first_failure_since_the_last_read_is_raised():
    w = torch.randn(5, 3, device="tpu")
    w.index_select(0, torch.tensor([9], device="tpu"))
    w.gather(0, torch.tensor([[6, 0, 0]], device="tpu"))
    with pytest.raises(IndexError, match=r"index out of range in self \(aten::index_select"):
        torch.tpu.synchronize()
    torch.tpu.synchronize()  # reported once
    assert w.sum().item() == pytest.approx(w.cpu().sum().item(), rel=1e-5)


def test_compiled_graphs_check_too():
    def lookup(w, i):
        return (w[i] * 2).sum()

    compiled = torch.compile(lookup, backend="tpu")
    w = torch.randn(5, 3, device="tpu")
    assert compiled(w, torch.tensor([0, 4], device="tpu")).item() == pytest.approx(
        lookup(w.cpu(), torch.tensor([0, 4])).item(), rel=1e-5
    )
    with pytest.raises(IndexError, match=r"index 8 is out of bounds for dimension 0 with size 5"):
        compiled(w, torch.tensor([0, 8], device="tpu")).item()


@torch_tpu.eager_mode("strict")
def test_a_failed_launch_does_not_fail_the_checks_after_it():
    w = torch.randn(5, 3, device="tpu")
    poisoned = torch.tensor([0, 1], device="tpu")
    torch_tpu._C._poison_storage(poisoned, "injected device failure")
    w.index_select(0, poisoned)  # its error code comes from a failed launch
    with pytest.raises(RuntimeError, match="injected device failure"):
        torch.tpu.synchronize()
    good = torch.tensor([4, 0], device="tpu")
    torch.testing.assert_close(w.index_select(0, good).cpu(), w.cpu().index_select(0, good.cpu()))
