"""Every torch.optim optimizer, in each form it offers (single-tensor, foreach,
fused, capturable), trained on tpu and compared with the same training on the
CPU; LR schedulers; gradient clipping; and that steady-state steps compile
nothing new."""

import contextlib
import copy
import importlib
import math

import pytest
import torch
from torch.utils._pytree import tree_flatten

import torch_tpu

SHAPES = [(4, 3), (5,), ()]
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(autouse=True)
def _no_fallback(no_fallback):
    yield


def _params(shapes=SHAPES, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g, dtype=dtype) for s in shapes]


def _grads(steps, shapes=SHAPES, dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    return [[torch.randn(s, generator=g, dtype=dtype) for s in shapes] for _ in range(steps)]


def _assert_close(actual, expected, rtol=RTOL, atol=ATOL):
    """Compares nested state (tensors on any device, numbers, lists, dicts)."""
    a_leaves, a_spec = tree_flatten(actual)
    e_leaves, e_spec = tree_flatten(expected)
    assert a_spec == e_spec, f"structure differs: {a_spec} vs {e_spec}"
    for a, e in zip(a_leaves, e_leaves):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"expected a tensor, got {a!r}"
            torch.testing.assert_close(a.cpu(), e.cpu(), rtol=rtol, atol=atol)
        elif isinstance(e, float):
            a = float(a)
            assert math.isclose(a, e, rel_tol=rtol, abs_tol=atol), f"{a} != {e}"
        else:
            assert a == e, f"{a!r} != {e!r}"


# ------------------------------------------------------------------ cases

SINGLE = dict(foreach=False)
FOREACH = dict(foreach=True)
FUSED = dict(fused=True)
CAPTURABLE = dict(foreach=False, capturable=True)
CAPTURABLE_FOREACH = dict(foreach=True, capturable=True)

ALL_FORMS = {
    torch.optim.SGD: [SINGLE, FOREACH, FUSED],
    torch.optim.Adam: [SINGLE, FOREACH, FUSED, CAPTURABLE, CAPTURABLE_FOREACH],
    torch.optim.AdamW: [SINGLE, FOREACH, FUSED, CAPTURABLE, CAPTURABLE_FOREACH],
    torch.optim.Adagrad: [SINGLE, FOREACH, FUSED],
}
for _cls in [
    torch.optim.RMSprop,
    torch.optim.Adadelta,
    torch.optim.Adamax,
    torch.optim.NAdam,
    torch.optim.RAdam,
    torch.optim.Rprop,
    torch.optim.ASGD,
]:
    ALL_FORMS[_cls] = [SINGLE, FOREACH, CAPTURABLE, CAPTURABLE_FOREACH]
ALL_FORMS[torch.optim.Adafactor] = [SINGLE, FOREACH]

# (class, hyperparameters, steps)
CONFIGS = [
    (torch.optim.SGD, dict(lr=0.1), 4),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9), 4),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True), 4),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.05), 4),
    (torch.optim.SGD, dict(lr=0.1, weight_decay=0.05), 4),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, maximize=True), 4),
    (torch.optim.Adam, dict(lr=0.01), 4),
    (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1, amsgrad=True), 4),
    (torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.9), maximize=True), 4),
    (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True), 4),
    (torch.optim.AdamW, dict(lr=0.01), 4),
    (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, amsgrad=True), 4),
    (torch.optim.AdamW, dict(lr=0.01, maximize=True), 4),
    (torch.optim.RMSprop, dict(lr=0.01), 4),
    (torch.optim.RMSprop, dict(lr=0.01, centered=True), 4),
    (torch.optim.RMSprop, dict(lr=0.01, momentum=0.9), 4),
    (torch.optim.RMSprop, dict(lr=0.01, centered=True, momentum=0.9, weight_decay=0.1), 4),
    (torch.optim.RMSprop, dict(lr=0.01, maximize=True), 4),
    (torch.optim.Adagrad, dict(lr=0.1), 4),
    (
        torch.optim.Adagrad,
        dict(lr=0.1, lr_decay=0.01, weight_decay=0.1, initial_accumulator_value=0.1),
        4,
    ),
    (torch.optim.Adagrad, dict(lr=0.1, maximize=True), 4),
    (torch.optim.Adadelta, dict(lr=1.0), 4),
    (torch.optim.Adadelta, dict(lr=0.5, rho=0.8, weight_decay=0.1), 4),
    (torch.optim.Adadelta, dict(lr=1.0, maximize=True), 4),
    (torch.optim.Adamax, dict(lr=0.01), 4),
    (torch.optim.Adamax, dict(lr=0.01, weight_decay=0.1, maximize=True), 4),
    (torch.optim.NAdam, dict(lr=0.01), 4),
    (torch.optim.NAdam, dict(lr=0.01, weight_decay=0.1, momentum_decay=0.01), 4),
    (torch.optim.NAdam, dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True), 4),
    (torch.optim.NAdam, dict(lr=0.01, maximize=True), 4),
    # RAdam rectifies from the sixth step on: train past it.
    (torch.optim.RAdam, dict(lr=0.01), 8),
    (torch.optim.RAdam, dict(lr=0.01, weight_decay=0.1), 8),
    (torch.optim.RAdam, dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True), 8),
    (torch.optim.RAdam, dict(lr=0.01, maximize=True), 8),
    (torch.optim.Rprop, dict(lr=0.01), 4),
    (torch.optim.Rprop, dict(lr=0.01, etas=(0.3, 1.5), step_sizes=(1e-3, 1), maximize=True), 4),
    (torch.optim.ASGD, dict(lr=0.01), 4),
    (torch.optim.ASGD, dict(lr=0.01, weight_decay=0.1, t0=2, lambd=0.01), 4),
    (torch.optim.Adafactor, dict(lr=0.01), 4),
    (torch.optim.Adafactor, dict(lr=0.01, weight_decay=0.1, maximize=True), 4),
]


def _form_id(form):
    if form.get("fused"):
        return "fused"
    if form.get("capturable"):
        return "capturable_foreach" if form["foreach"] else "capturable"
    return "foreach" if form["foreach"] else "single"


def _cases():
    for cls, hyper, steps in CONFIGS:
        for form in ALL_FORMS[cls]:
            kw = ",".join(f"{k}={v}" for k, v in hyper.items())
            yield pytest.param(
                cls, {**hyper, **form}, steps, id=f"{cls.__name__}-{_form_id(form)}-{kw}"
            )


# A tensor learning rate, where the class takes one: every form but foreach
# without capturable (PyTorch refuses that combination).
TENSOR_LR = [
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9), [SINGLE, FUSED]),
    (torch.optim.Adam, dict(lr=0.01), [SINGLE, FUSED, CAPTURABLE, CAPTURABLE_FOREACH]),
    (
        torch.optim.Adam,
        dict(lr=0.01, weight_decay=0.1, amsgrad=True),
        [FUSED, CAPTURABLE, CAPTURABLE_FOREACH],
    ),
    (torch.optim.AdamW, dict(lr=0.01), [SINGLE, FUSED, CAPTURABLE, CAPTURABLE_FOREACH]),
    (
        torch.optim.AdamW,
        dict(lr=0.01, weight_decay=0.1, amsgrad=True),
        [FUSED, CAPTURABLE, CAPTURABLE_FOREACH],
    ),
    (torch.optim.Adagrad, dict(lr=0.1), [SINGLE, FUSED]),
    (torch.optim.RMSprop, dict(lr=0.01, momentum=0.9), [SINGLE, CAPTURABLE_FOREACH]),
    (torch.optim.NAdam, dict(lr=0.01), [SINGLE, CAPTURABLE, CAPTURABLE_FOREACH]),
    (torch.optim.RAdam, dict(lr=0.01), [SINGLE, CAPTURABLE, CAPTURABLE_FOREACH]),
    (torch.optim.Adamax, dict(lr=0.01), [SINGLE, CAPTURABLE, CAPTURABLE_FOREACH]),
]


def _tensor_lr_cases():
    for cls, hyper, forms in TENSOR_LR:
        for form in forms:
            kw = ",".join(f"{k}={v}" for k, v in hyper.items() if k != "lr")
            kwargs = {**hyper, **form, "lr": torch.tensor(hyper["lr"])}
            steps = 8 if cls is torch.optim.RAdam else 4
            yield pytest.param(cls, kwargs, steps, id=f"{cls.__name__}-{_form_id(form)}-{kw}")


_CAPTURABLE_MODULES = [
    "adadelta", "adam", "adamax", "asgd", "nadam", "radam", "rmsprop", "rprop"
]  # fmt: skip


@contextlib.contextmanager
def _capturable_on_cpu():
    """Lets the CPU reference run the capturable code paths too (PyTorch
    allows them on accelerators only), so both sides compute alike."""

    def devices(supports_xla=True):
        return [*original(supports_xla), "cpu"]

    modules = [importlib.import_module(f"torch.optim.{m}") for m in _CAPTURABLE_MODULES]
    original = modules[0]._get_capturable_supported_devices
    for m in modules:
        m._get_capturable_supported_devices = devices
    try:
        yield
    finally:
        for m in modules:
            m._get_capturable_supported_devices = original


def _train(device, cls, kwargs, steps, shapes=SHAPES):
    params = [p.to(device).requires_grad_() for p in _params(shapes)]
    opt = cls(params, **copy.deepcopy(kwargs))
    for grads in _grads(steps, shapes):
        for p, g in zip(params, grads):
            p.grad = g.to(device)
        opt.step()
    return params, opt


def _check_against_cpu(cls, kwargs, steps, shapes=SHAPES):
    tpu_params, tpu_opt = _train("tpu", cls, kwargs, steps, shapes)
    with _capturable_on_cpu():
        cpu_params, cpu_opt = _train("cpu", cls, kwargs, steps, shapes)
    for p in tpu_params:
        assert p.device.type == "tpu"
    _assert_close([p.detach() for p in tpu_params], [p.detach() for p in cpu_params])
    tpu_state = [tpu_opt.state[p] for p in tpu_params]
    cpu_state = [cpu_opt.state[p] for p in cpu_params]
    assert [sorted(s) for s in tpu_state] == [sorted(s) for s in cpu_state]
    on_device = kwargs.get("fused") or kwargs.get("capturable")
    for state in tpu_state:
        for key, value in state.items():
            # Scalar state (step counts, NAdam's mu_product) of the
            # single-tensor and foreach paths may live on the CPU, as PyTorch
            # keeps them on every device; everything else is on the device.
            if isinstance(value, torch.Tensor) and (on_device or value.dim() > 0):
                assert value.device.type == "tpu", (key, value.device)
    _assert_close(tpu_state, cpu_state)
    # Learning rates (numbers or tensors) are left as they were given.
    for tg, cg in zip(tpu_opt.param_groups, cpu_opt.param_groups):
        _assert_close(tg["lr"], cg["lr"])


@pytest.mark.parametrize(("cls", "kwargs", "steps"), list(_cases()))
def test_optimizer_matches_cpu(cls, kwargs, steps):
    _check_against_cpu(cls, kwargs, steps)


@pytest.mark.parametrize(("cls", "kwargs", "steps"), list(_tensor_lr_cases()))
def test_optimizer_tensor_lr_matches_cpu(cls, kwargs, steps):
    _check_against_cpu(cls, kwargs, steps)


@pytest.mark.parametrize(
    ("cls", "form"),
    [
        (torch.optim.Adam, FUSED),
        (torch.optim.Adam, CAPTURABLE),
        (torch.optim.AdamW, FUSED),
        (torch.optim.AdamW, CAPTURABLE_FOREACH),
        (torch.optim.SGD, FUSED),
        (torch.optim.Adagrad, FUSED),
    ],
    ids=lambda x: x.__name__ if isinstance(x, type) else _form_id(x),
)
def test_optimizer_device_lr_matches_cpu(cls, form):
    """A learning rate tensor that lives on the device, as with CUDA."""

    def run(device):
        params = [p.to(device).requires_grad_() for p in _params()]
        opt = cls(params, lr=torch.tensor(0.01, device=device), weight_decay=0.1, **form)
        for grads in _grads(4):
            for p, g in zip(params, grads):
                p.grad = g.to(device)
            opt.step()
        return [p.detach() for p in params], [opt.state[p] for p in params]

    tpu_params, tpu_state = run("tpu")
    with _capturable_on_cpu():
        cpu_params, cpu_state = run("cpu")
    _assert_close(tpu_params, cpu_params)
    _assert_close(tpu_state, cpu_state)


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (torch.optim.SGD, dict(lr=0.1, momentum=0.9)),
        (torch.optim.Adam, dict(lr=0.01, amsgrad=True)),
        (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
        (torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.01)),
    ],
    ids=lambda x: x.__name__ if isinstance(x, type) else "",
)
def test_grad_scaler_drives_fused_optimizer(cls, kwargs):
    """GradScaler hands fused optimizers grad_scale and found_inf; a step
    with an inf gradient is skipped (and its step count taken back)."""

    def run(device):
        params = [p.to(device).requires_grad_() for p in _params()]
        opt = cls(params, fused=True, **kwargs)
        scaler = torch.amp.GradScaler(device, init_scale=2.0**8, growth_interval=2)
        for i, grads in enumerate(_grads(5)):
            opt.zero_grad()
            loss = sum((p * g).sum() for p, g in zip(params, [g.to(device) for g in grads]))
            if i == 2:
                loss = loss * float("inf")
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        grads = [p.grad for p in params]
        return [p.detach() for p in params], [opt.state[p] for p in params], grads, scaler

    tpu_params, tpu_state, tpu_grads, tpu_scaler = run("tpu")
    cpu_params, cpu_state, cpu_grads, cpu_scaler = run("cpu")
    assert tpu_scaler.get_scale() == cpu_scaler.get_scale()
    _assert_close(tpu_params, cpu_params)
    _assert_close(tpu_state, cpu_state)
    _assert_close(tpu_grads, cpu_grads)


@pytest.mark.parametrize(
    "hyper",
    [dict(), dict(weight_decay=0.1, nesterov=False, adjust_lr_fn="match_rms_adamw")],
    ids=["default", "match_rms_adamw"],
)
def test_muon_matches_cpu(hyper):
    # Muon orthogonalises 2-D updates (Newton-Schulz iterations of matmuls).
    if not hasattr(torch.optim, "Muon"):
        pytest.skip("torch.optim.Muon is newer than this PyTorch")
    _check_against_cpu(torch.optim.Muon, {"lr": 0.02, **hyper}, 4, shapes=[(4, 3), (6, 5)])


# ------------------------------------------------------------------ LBFGS


def _lbfgs_loss(params, targets):
    # Rosenbrock's valley (far from converged after a few steps, so the
    # convergence tests inside LBFGS do not decide on rounding noise).
    loss = 0
    for p, t in zip(params, targets):
        x = p.reshape(-1) - 0.1 * t.reshape(-1)
        loss = loss + ((1 - x) ** 2).sum() + 10 * ((x[1:] - x[:-1] ** 2) ** 2).sum()
    return loss


def _train_lbfgs(device, steps, dtype, **kwargs):
    params = [p.to(device, dtype).requires_grad_() for p in _params()]
    targets = [t.to(device, dtype) for t in _grads(1)[0]]
    opt = torch.optim.LBFGS(params, **kwargs)
    losses = []

    def closure():
        opt.zero_grad()
        loss = _lbfgs_loss(params, targets)
        loss.backward()
        return loss

    for _ in range(steps):
        losses.append(opt.step(closure))
    return params, opt, losses


@pytest.mark.parametrize(
    "dtype",
    [torch.float64, torch.float32],
    ids=["float64", "float32"],
)
@pytest.mark.parametrize(
    "kwargs",
    [
        dict(lr=0.5, max_iter=5),
        dict(lr=1.0, max_iter=6, history_size=3),
        dict(lr=1.0, max_iter=5, line_search_fn="strong_wolfe"),
        dict(lr=1.0, max_iter=8, history_size=2, line_search_fn="strong_wolfe"),
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()),
)
def test_lbfgs_matches_cpu(kwargs, dtype):
    tpu_params, tpu_opt, tpu_losses = _train_lbfgs("tpu", 3, dtype, **kwargs)
    cpu_params, cpu_opt, cpu_losses = _train_lbfgs("cpu", 3, dtype, **kwargs)
    # In float64 the two follow the same path to rounding; in float32 the
    # Rosenbrock valley amplifies the rounding of the gradients a little.
    # In float32 the history amplifies rounding: the CPU's own float32 run is 3.3e-4 (relative)
    # from its float64 run with history_size=3.
    tol = dict(rtol=1e-9, atol=1e-9) if dtype == torch.float64 else dict(rtol=1e-3, atol=1e-3)
    tpu_state = tpu_opt.state[tpu_opt._params[0]]
    cpu_state = cpu_opt.state[cpu_opt._params[0]]
    assert tpu_state["func_evals"] == cpu_state["func_evals"]
    assert tpu_state["n_iter"] == cpu_state["n_iter"]
    _assert_close([x.detach() for x in tpu_losses], [x.detach() for x in cpu_losses], **tol)
    _assert_close([p.detach() for p in tpu_params], [p.detach() for p in cpu_params], **tol)
    assert sorted(tpu_state) == sorted(cpu_state)
    assert tpu_state["d"].device.type == "tpu"
    if dtype == torch.float64:
        for key in [
            "d",
            "t",
            "prev_flat_grad",
            "prev_loss",
            "H_diag",
            "old_dirs",
            "old_stps",
            "ro",
        ]:
            _assert_close(tpu_state[key], cpu_state[key], **tol)


# ------------------------------------------------------------------ LR schedulers

SCHEDULERS = {
    "StepLR": lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5),
    # Cycles momentum too where the optimizer has one (Adagrad has none).
    "OneCycleLR": lambda opt: torch.optim.lr_scheduler.OneCycleLR(
        opt,
        max_lr=0.1,
        total_steps=8,
        cycle_momentum=any(k in opt.defaults for k in ("momentum", "betas")),
    ),
    "CosineAnnealingLR": lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=5),
    "LambdaLR": lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.9**e),
    "ReduceLROnPlateau": lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(
        opt, factor=0.5, patience=1
    ),
}

SCHEDULED_OPTIMIZERS = {
    "SGD-momentum": (torch.optim.SGD, dict(lr=0.05, momentum=0.9)),
    "Adam-foreach": (torch.optim.Adam, dict(lr=0.01, foreach=True)),
    "AdamW-fused": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, fused=True)),
    "Adam-fused-tensor-lr": (torch.optim.Adam, dict(lr=torch.tensor(0.01), fused=True)),
    "SGD-fused": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, fused=True)),
    "Adagrad-fused": (torch.optim.Adagrad, dict(lr=0.05, fused=True)),
}


def _train_scheduled(device, opt_name, sched_name, steps=8):
    cls, kwargs = SCHEDULED_OPTIMIZERS[opt_name]
    params = [p.to(device).requires_grad_() for p in _params()]
    opt = cls(params, **copy.deepcopy(kwargs))
    sched = SCHEDULERS[sched_name](opt)
    lrs = []
    for grads in _grads(steps):
        for p, g in zip(params, grads):
            p.grad = g.to(device)
        opt.step()
        if sched_name == "ReduceLROnPlateau":
            # A plateau (on the device, as a loss would be) and the lr drops.
            sched.step(sum((p.detach() ** 2).sum() for p in params) * 0 + 1.0)
        else:
            sched.step()
        lr = opt.param_groups[0]["lr"]
        lrs.append(lr.item() if isinstance(lr, torch.Tensor) else lr)
    return params, opt, lrs


@pytest.mark.parametrize("opt_name", list(SCHEDULED_OPTIMIZERS))
@pytest.mark.parametrize("sched_name", list(SCHEDULERS))
def test_lr_scheduler_matches_cpu(sched_name, opt_name):
    tpu_params, tpu_opt, tpu_lrs = _train_scheduled("tpu", opt_name, sched_name)
    cpu_params, cpu_opt, cpu_lrs = _train_scheduled("cpu", opt_name, sched_name)
    _assert_close(tpu_lrs, cpu_lrs)
    assert len(set(cpu_lrs)) > 1, "the schedule should change the learning rate"
    _assert_close([p.detach() for p in tpu_params], [p.detach() for p in cpu_params])
    _assert_close([tpu_opt.state[p] for p in tpu_params], [cpu_opt.state[p] for p in cpu_params])


# ------------------------------------------------------------------ gradient clipping


def _grads_with_params(device, scale=1.0, inf=False):
    params = [p.to(device).requires_grad_() for p in _params()]
    for p, g in zip(params, _grads(1)[0]):
        g = g * scale
        if inf and g.dim() == 1:
            g[2] = float("inf")
        p.grad = g.to(device)
    return params


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf"), 0.5])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_cpu(foreach, norm_type, max_norm):
    tpu = _grads_with_params("tpu")
    cpu = _grads_with_params("cpu")
    tpu_norm = torch.nn.utils.clip_grad_norm_(tpu, max_norm, norm_type, foreach=foreach)
    cpu_norm = torch.nn.utils.clip_grad_norm_(cpu, max_norm, norm_type)
    assert tpu_norm.device.type == "tpu"
    _assert_close(tpu_norm, cpu_norm)
    _assert_close([p.grad for p in tpu], [p.grad for p in cpu])
    assert all(p.grad.device.type == "tpu" for p in tpu)


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("norm_type", [2.0, float("inf")])
def test_clip_grad_norm_nonfinite(foreach, norm_type):
    tpu = _grads_with_params("tpu", inf=True)
    cpu = _grads_with_params("cpu", inf=True)
    with pytest.raises(RuntimeError, match="non-finite") as cpu_error:
        torch.nn.utils.clip_grad_norm_(cpu, 1.0, norm_type, error_if_nonfinite=True)
    with pytest.raises(RuntimeError, match="non-finite") as tpu_error:
        torch.nn.utils.clip_grad_norm_(
            tpu, 1.0, norm_type, error_if_nonfinite=True, foreach=foreach
        )
    assert str(tpu_error.value) == str(cpu_error.value)
    # Without the error the grads are clipped the same way (to nan/0 as the
    # CPU does).
    tpu_norm = torch.nn.utils.clip_grad_norm_(tpu, 1.0, norm_type, foreach=foreach)
    cpu_norm = torch.nn.utils.clip_grad_norm_(cpu, 1.0, norm_type)
    torch.testing.assert_close(tpu_norm.cpu(), cpu_norm, equal_nan=True)
    for a, e in zip(tpu, cpu):
        torch.testing.assert_close(a.grad.cpu(), e.grad, equal_nan=True)


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("clip_value", [0.3, 5.0])
def test_clip_grad_value_matches_cpu(foreach, clip_value):
    tpu = _grads_with_params("tpu", scale=2.0)
    cpu = _grads_with_params("cpu", scale=2.0)
    torch.nn.utils.clip_grad_value_(tpu, clip_value, foreach=foreach)
    torch.nn.utils.clip_grad_value_(cpu, clip_value)
    _assert_close([p.grad for p in tpu], [p.grad for p in cpu])
    assert all(p.grad.device.type == "tpu" for p in tpu)


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("norm_type", [2.0, float("inf")])
def test_get_total_norm_and_clip_grads_with_norm(foreach, norm_type):
    utils = torch.nn.utils
    if not hasattr(utils, "get_total_norm"):
        pytest.skip("get_total_norm is newer than this PyTorch")
    tpu = _grads_with_params("tpu")
    cpu = _grads_with_params("cpu")
    tpu_grads = [p.grad for p in tpu]
    cpu_grads = [p.grad for p in cpu]
    tpu_norm = utils.get_total_norm(tpu_grads, norm_type, foreach=foreach)
    cpu_norm = utils.get_total_norm(cpu_grads, norm_type)
    assert tpu_norm.device.type == "tpu"
    _assert_close(tpu_norm, cpu_norm)
    utils.clip_grads_with_norm_(tpu, 0.5, tpu_norm, foreach=foreach)
    utils.clip_grads_with_norm_(cpu, 0.5, cpu_norm)
    _assert_close([p.grad for p in tpu], [p.grad for p in cpu])


# ------------------------------------------------------------------ compiles


def _compile_counts():
    m = torch_tpu.metrics()
    return m["compiles"], m["cache_misses"]


STEADY = [
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, foreach=False)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, foreach=True)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, fused=True)),
    (torch.optim.Adam, dict(lr=0.01, foreach=False)),
    (torch.optim.Adam, dict(lr=0.01, foreach=True)),
    (torch.optim.Adam, dict(lr=0.01, fused=True)),
    (torch.optim.Adam, dict(lr=torch.tensor(0.01), fused=True)),
    (torch.optim.Adam, dict(lr=0.01, foreach=True, capturable=True)),
    (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, foreach=True)),
    (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, fused=True)),
    (torch.optim.AdamW, dict(lr=torch.tensor(0.01), amsgrad=True, fused=True)),
    (torch.optim.AdamW, dict(lr=0.01, foreach=False, capturable=True)),
    (torch.optim.RMSprop, dict(lr=0.01, momentum=0.9, foreach=True)),
    (torch.optim.Adagrad, dict(lr=0.1, fused=True)),
    (torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.01, foreach=True)),
    (torch.optim.NAdam, dict(lr=0.01, foreach=True)),
    (torch.optim.NAdam, dict(lr=0.01, foreach=True, capturable=True)),
    (torch.optim.RAdam, dict(lr=0.01, foreach=False)),
    (torch.optim.RAdam, dict(lr=0.01, foreach=True)),
    (torch.optim.RAdam, dict(lr=0.01, foreach=False, capturable=True)),
    (torch.optim.Adadelta, dict(lr=1.0, foreach=True)),
    (torch.optim.Adamax, dict(lr=0.01, foreach=False)),
    (torch.optim.ASGD, dict(lr=0.01, foreach=True)),
    (torch.optim.Rprop, dict(lr=0.01, foreach=True, capturable=True)),
    (torch.optim.Adafactor, dict(lr=0.01, foreach=True)),
]


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    STEADY,
    ids=[f"{c.__name__}-" + ",".join(f"{k}={v}" for k, v in kw.items()) for c, kw in STEADY],
)
def test_steady_steps_compile_nothing(cls, kwargs):
    """After two steps every program a step needs exists: a step count or a
    Python-number learning rate is an operand, not part of the program."""
    # RAdam's single-tensor form takes another branch from step 6 on.
    radam = cls is torch.optim.RAdam and not kwargs.get("foreach") and not kwargs.get("capturable")
    steps, warmup = (10, 7) if radam else (6, 2)
    opt, params = _tpu_optimizer(cls, kwargs)
    _assert_no_compiles_after(warmup, opt, params, _grads(steps))


@pytest.mark.parametrize(
    "opt_name",
    ["SGD-momentum", "Adam-foreach", "AdamW-fused", "Adam-fused-tensor-lr", "SGD-fused"]
    + ["Adagrad-fused"],
)
def test_scheduled_steps_compile_nothing(opt_name):
    """A learning rate that changes every step (a scheduler) compiles nothing
    new either, a Python-float lr of a fused optimizer included."""
    cls, kwargs = SCHEDULED_OPTIMIZERS[opt_name]
    opt, params = _tpu_optimizer(cls, kwargs)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    _assert_no_compiles_after(2, opt, params, _grads(6), sched)


@pytest.mark.parametrize("foreach", [False, True])
def test_rprop_steady_steps_compile_nothing(foreach):
    # Rprop assigns through boolean masks (sign[sign.gt(0)] = etaplus): a select, no sync.
    shapes = [(6, 7), (11,)] if foreach else [(7, 6), (9,)]  # programs of their own
    opt, params = _tpu_optimizer(torch.optim.Rprop, dict(lr=0.01, foreach=foreach), shapes)
    _assert_no_compiles_after(2, opt, params, _grads(8, shapes))


def _tpu_optimizer(cls, kwargs, shapes=SHAPES):
    params = [p.to("tpu").requires_grad_() for p in _params(shapes)]
    return cls(params, **copy.deepcopy(kwargs)), params


def _assert_no_compiles_after(warmup, opt, params, grads, sched=None):
    counts = None
    for i, step_grads in enumerate(grads):
        if i == warmup:
            counts = _compile_counts()
        for p, g in zip(params, step_grads):
            p.grad = g.to("tpu")
        opt.step()
        if sched is not None:
            sched.step()
    torch.tpu.synchronize()
    assert _compile_counts() == counts
