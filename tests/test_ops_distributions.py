"""Random distributions on tpu: moments and support against PyTorch's definitions
(exponential, geometric, cauchy, log-normal, normal with tensor parameters,
multinomial, randperm, gamma, Poisson) and reproducibility from the seed."""

import math

import pytest
import torch

import torch_tpu  # noqa: F401

N = 20000


def draws(fn, seed=0):
    torch.manual_seed(seed)
    return fn().cpu()


def assert_moments(x, mean, var, tol=0.05):
    """Sample mean and variance within `tol` (relative to the standard deviation
    for the mean, relative for the variance): several standard errors at N."""
    x = x.double()
    sd = math.sqrt(var)
    assert abs(x.mean().item() - mean) < tol * sd, (x.mean().item(), mean)
    assert abs(x.var().item() - var) < 2 * tol * var, (x.var().item(), var)


def empty(dtype=torch.float32, n=N):
    return torch.empty(n, device="tpu", dtype=dtype)


# ---------------------------------------------------------------- simple transforms


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_exponential(dtype, no_fallback):
    x = draws(lambda: empty(dtype).exponential_(2.0))
    assert x.dtype == dtype and (x >= 0).all() and x.isfinite().all()
    assert_moments(x, 0.5, 0.25, tol=0.05 if dtype in (torch.float32, torch.float64) else 0.1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_geometric(dtype, no_fallback):
    p = 0.3
    x = draws(lambda: empty(dtype).geometric_(p))
    assert x.dtype == dtype and (x >= 1).all() and (x == x.round()).all()
    assert_moments(x, 1 / p, (1 - p) / p**2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cauchy(dtype, no_fallback):
    x = draws(lambda: empty(dtype).cauchy_(1.0, 2.0)).double()
    # no moments: quartiles are median -/+ sigma
    q = torch.quantile(x, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    assert torch.allclose(q, torch.tensor([-1.0, 1.0, 3.0], dtype=torch.float64), atol=0.1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_log_normal(dtype, no_fallback):
    mu, sigma = 0.2, 0.5
    x = draws(lambda: empty(dtype).log_normal_(mu, sigma))
    assert (x > 0).all()
    assert_moments(x.double().log(), mu, sigma**2, tol=0.05 if dtype != torch.bfloat16 else 0.1)


def test_normal_with_tensor_parameters(no_fallback):
    mean = torch.linspace(-3, 3, 4, device="tpu").repeat(N // 4)
    std = torch.tensor([0.5, 1.0, 2.0, 4.0], device="tpu").repeat(N // 4)
    x = draws(lambda: torch.normal(mean, 2.0)).view(-1, 4)
    for j, m in enumerate(torch.linspace(-3, 3, 4).tolist()):
        assert_moments(x[:, j], m, 4.0, tol=0.1)
    y = draws(lambda: torch.normal(1.0, std)).view(-1, 4)
    z = draws(lambda: torch.normal(mean, std)).view(-1, 4)
    for j, s in enumerate([0.5, 1.0, 2.0, 4.0]):
        assert_moments(y[:, j], 1.0, s * s, tol=0.1)
        assert_moments(z[:, j] - torch.linspace(-3, 3, 4)[j], 0.0, s * s, tol=0.1)
    # broadcasting, out= and dtype
    b = draws(lambda: torch.normal(torch.zeros(3, 1, device="tpu"), torch.ones(4, device="tpu")))
    assert b.shape == (3, 4)
    out = torch.empty(N, device="tpu", dtype=torch.float64)
    torch.manual_seed(0)
    torch.normal(mean.double(), 2.0, out=out)
    assert out.dtype == torch.float64
    assert_moments(out.cpu().view(-1, 4)[:, 0], -3.0, 4.0, tol=0.1)


def test_normal_gradients(no_fallback):
    # PyTorch defines the gradients of normal's parameters as zero
    mean = torch.zeros(100, device="tpu", requires_grad=True)
    std = torch.full((100,), 2.0, device="tpu", requires_grad=True)
    torch.normal(mean, std).sum().backward()
    assert torch.equal(mean.grad.cpu(), torch.zeros(100))
    assert torch.equal(std.grad.cpu(), torch.zeros(100))


def test_in_place_on_a_view(no_fallback):
    base = torch.zeros(6, 8, device="tpu")
    base[:, ::2].exponential_()
    cpu = base.cpu()
    assert (cpu[:, ::2] > 0).all() and (cpu[:, 1::2] == 0).all()


# ---------------------------------------------------------------- multinomial, randperm


def test_multinomial_with_replacement(no_fallback):
    p = torch.tensor([[0.1, 0.2, 0.0, 0.7], [1.0, 1.0, 1.0, 1.0]], device="tpu")
    x = draws(lambda: torch.multinomial(p, N, replacement=True))
    assert x.dtype == torch.int64 and x.shape == (2, N)
    freq0 = torch.bincount(x[0], minlength=4).double() / N
    freq1 = torch.bincount(x[1], minlength=4).double() / N
    assert freq0[2] == 0
    assert torch.allclose(
        freq0, torch.tensor([0.1, 0.2, 0.0, 0.7], dtype=torch.float64), atol=0.015
    )
    assert torch.allclose(freq1, torch.full((4,), 0.25, dtype=torch.float64), atol=0.015)


def test_multinomial_without_replacement(no_fallback):
    p = torch.tensor([1.0, 2.0, 0.0, 7.0, 0.0], device="tpu").repeat(N // 4, 1)
    x = draws(lambda: torch.multinomial(p, 3))
    assert x.shape == (N // 4, 3)
    assert (x.sort(1).values == torch.tensor([0, 1, 3])).all()  # distinct, never p = 0
    first = torch.bincount(x[:, 0], minlength=5).double() / x.shape[0]
    assert torch.allclose(
        first, torch.tensor([0.1, 0.2, 0, 0.7, 0], dtype=torch.float64), atol=0.02
    )
    # second draw given first = 3: 1 / 3 and 2 / 3
    second = x[x[:, 0] == 3, 1]
    assert abs((second == 1).double().mean().item() - 2 / 3) < 0.03
    one = draws(lambda: torch.multinomial(torch.tensor([0.0, 1.0, 0.0], device="tpu"), 1))
    assert one.tolist() == [1]


@pytest.mark.parametrize("n", [1, 7, 1000])
def test_randperm(n, no_fallback):
    x = draws(lambda: torch.randperm(n, device="tpu"))
    assert x.dtype == torch.int64 and torch.equal(x.sort().values, torch.arange(n))
    y = draws(lambda: torch.randperm(n, device="tpu", dtype=torch.float32), seed=1)
    assert y.dtype == torch.float32 and torch.equal(y.sort().values, torch.arange(n).float())


def test_randperm_is_uniform(no_fallback):
    torch.manual_seed(0)
    firsts = torch.stack([torch.randperm(4, device="tpu") for _ in range(400)]).cpu()
    counts = torch.bincount(firsts[:, 0], minlength=4)
    assert (counts > 60).all()  # 100 expected each


# ---------------------------------------------------------------- gamma, Poisson


@pytest.mark.parametrize("alpha", [0.3, 1.0, 4.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_standard_gamma(alpha, dtype, no_fallback):
    x = draws(lambda: torch._standard_gamma(torch.full((N,), alpha, device="tpu", dtype=dtype)))
    assert x.dtype == dtype and (x > 0).all()
    assert_moments(x, alpha, alpha, tol=0.07)


def test_standard_gamma_edge_cases_and_gamma_distribution(no_fallback):
    alpha = torch.tensor([0.0, 2.0, float("nan")], device="tpu")
    x = torch._standard_gamma(alpha).cpu()
    assert x[0] == 0 and x[1] > 0 and x[2].isnan()
    conc = torch.full((N,), 3.0, device="tpu")
    torch.manual_seed(0)
    s = torch.distributions.Gamma(conc, torch.full((N,), 2.0, device="tpu")).sample().cpu()
    assert_moments(s, 1.5, 0.75, tol=0.07)


@pytest.mark.parametrize("rate", [0.5, 4.0, 30.0, 1e4])
def test_poisson(rate, no_fallback):
    x = draws(lambda: torch.poisson(torch.full((N,), rate, device="tpu")))
    assert (x >= 0).all() and (x == x.round()).all()
    assert_moments(x, rate, rate, tol=0.07)


def test_poisson_mixed_rates(no_fallback):
    rates = torch.tensor([0.0, 2.0, 50.0], device="tpu").repeat(N // 3 + 1)
    x = draws(lambda: torch.poisson(rates)).view(-1, 3).double()
    assert (x[:, 0] == 0).all()
    assert abs(x[:, 1].mean() - 2.0) < 0.1 and abs(x[:, 2].mean() - 50.0) < 0.5


# ---------------------------------------------------------------- reproducibility

SAMPLERS = {
    "exponential": lambda: empty(n=64).exponential_(),
    "geometric": lambda: empty(n=64).geometric_(0.2),
    "cauchy": lambda: empty(n=64).cauchy_(),
    "log_normal": lambda: empty(n=64).log_normal_(),
    "normal": lambda: torch.normal(torch.zeros(64, device="tpu"), torch.ones(64, device="tpu")),
    "multinomial": lambda: torch.multinomial(torch.ones(3, 50, device="tpu"), 10),
    "multinomial_replacement": lambda: torch.multinomial(torch.ones(50, device="tpu"), 10, True),
    "randperm": lambda: torch.randperm(64, device="tpu"),
    "gamma": lambda: torch._standard_gamma(torch.full((64,), 0.7, device="tpu")),
    "poisson": lambda: torch.poisson(torch.full((64,), 20.0, device="tpu")),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_seed_reproducibility(name, no_fallback):
    fn = SAMPLERS[name]
    a, b, c = draws(fn, seed=5), draws(fn, seed=5), draws(fn, seed=6)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    torch.manual_seed(5)
    fn()
    assert not torch.equal(fn().cpu(), a)  # the generator advances


def test_explicit_generator(no_fallback):
    g = torch.Generator(device="tpu").manual_seed(3)
    rates = torch.full((64,), 20.0, device="tpu")
    a = torch.poisson(rates, generator=g).cpu()
    b = torch.multinomial(rates, 5, generator=g).cpu()
    g.manual_seed(3)
    assert torch.equal(torch.poisson(rates, generator=g).cpu(), a)
    assert torch.equal(torch.multinomial(rates, 5, generator=g).cpu(), b)


# The meta kernels of exponential_, geometric_, cauchy_ and log_normal_ are
# torch._refs decompositions that reject any generator argument: the engine
# leaves the generator out of the meta call.
@pytest.mark.parametrize("method", ["exponential_", "geometric_", "cauchy_", "log_normal_"])
def test_explicit_generator_in_place_draws(method, no_fallback):
    def draw(seed):
        arg = (0.3,) if method == "geometric_" else ()
        return getattr(empty(n=64), method)(
            *arg, generator=torch.Generator("tpu").manual_seed(seed)
        )

    first, again, other = draw(3).cpu(), draw(3).cpu(), draw(4).cpu()
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
