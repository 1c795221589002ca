"""pytest plugin of ``torch_tpu.tools.pytorch_suites``: runs PyTorch's device-generic test
files, unedited, on ``tpu``.

Loaded with ``-p`` in the controller and in every xdist worker, before any test file imports
torch: it gives each worker its own device lock directory, names the instantiated classes
``...TPU``, adds the helpers the (older) test files import under names PyTorch has since
changed, skips the tests that cannot pass by design (with the reason), keeps a fixed sample
when asked, stops the session at a deadline, and appends one JSON line per test outcome to
``$TORCH_TPU_SUITE_RESULTS`` (so a run that is cut short still reports what it ran).
"""

from __future__ import annotations

import json
import os
import time
import zlib

import pytest

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER and os.environ.get("TORCH_TPU_SUITE_LOCKS"):
    # One device per process: each worker holds its own lock.
    os.environ["TORCH_TPU_LOCK_DIR"] = os.path.join(os.environ["TORCH_TPU_SUITE_LOCKS"], _WORKER)

_SPARSE = "sparse layouts are not supported on tpu"
# Tests that cannot pass by design, by test name (without the TPU suffix's dtype part
# mattering: a substring of the node id) and the reason.
BY_DESIGN: dict[str, str] = {
    "complex32": "complex32 (chalf) is not a tpu dtype: XLA has no 16-bit complex type",
    "_chalf": "complex32 (chalf) is not a tpu dtype: XLA has no 16-bit complex type",
    "sparse": _SPARSE,
    "Sparse": _SPARSE,
    "quantized": "quantized dtypes are not supported on tpu",
    "nested": "nested tensors are not supported on tpu",
    "test_map_": "Tensor.map_/map2_ are CPU-only in PyTorch",
    "test_map2_": "Tensor.map_/map2_ are CPU-only in PyTorch",
    "test_broadcast_fn_map": "Tensor.map_/map2_ are CPU-only in PyTorch",
    "test_msort": "numpy.msort was removed in NumPy 2 (fails on the CPU too)",
    # Tests that take complex32 along with the other dtypes.
    "TestTensorCreationTPU::test_ones_tpu": "it makes complex32 tensors too",
    "TestTensorCreationTPU::test_zeros_tpu": "it makes complex32 tensors too",
    "test_cat_all_dtypes_and_devices_tpu": "it concatenates complex32 tensors too",
    "test_fill_all_dtypes_and_devices_tpu": "it fills complex32 tensors too",
    "test_tensor_factories_empty_tpu": "it makes complex32 tensors too",
    "test_torch_complex_tpu_float16": "complex() of float16 parts is complex32",
    # torch.complex of float16 parts, a complex scalar ** a float16 tensor.
    "complex_tpu_float16": "it makes complex32 tensors from float16 ones",
    "TestBinaryUfuncsTPU::test_pow_tpu_float16": "a complex scalar ** a float16 tensor is complex32",
    "test_complex_scalar_pow_tensor_tpu_float16": "a complex scalar ** float16 is complex32",
    "test_complex_half_tpu": "it makes complex32 tensors",
    "test_complex_promotion_tpu": "it promotes to complex32 too",
    "test_complex_assertraises_tpu": "it makes complex32 tensors too",
    "TestTorchDeviceTypeTPU::test_copy__tpu_": "it copies into every dtype, complex32 included",
    "test_complex_half_experimental_warning_tpu": "it makes complex32 tensors",
    "test_memory_format_empty_like_tpu": "it makes sparse tensors too",
    # A complex Python number with a float16 tensor promotes to complex32.
    "test_result_type_tpu_complex128_float16": "complex scalar + float16 tensor is complex32",
    "test_result_type_tpu_complex64_float16": "complex scalar + float16 tensor is complex32",
    "test_result_type_tpu_float16_complex128": "complex scalar + float16 tensor is complex32",
    "test_result_type_tpu_float16_complex64": "complex scalar + float16 tensor is complex32",
    "test_tensor_ctor_device_inference_tpu": "it makes sparse tensors too",
    "test_TransformerEncoderLayer_empty_tpu": "its fast path makes nested tensors",
    # Tests that take quantized tensors along with the others.
    "TestShapeOpsTPU::test_flip_tpu_float32": "it flips quantized tensors too (its other dtypes run)",
    "TestOldViewOpsTPU::test_flatten_tpu": "it flattens a quantized tensor too",
    "TestOldViewOpsTPU::test_ravel_tpu": "it ravels quantized tensors too",
    # CUDA's path of the test returns before the part that indexes a device tensor with a
    # CPU index; index_fill raises there on CUDA as on tpu (its TensorIterator wants one device).
    "test_stable_sort_against_numpy": "index_fill of a device tensor with a CPU index",
    # PyTorch's own _get_legacy_storage_class gives torch.tpu.FloatStorage and so on for a
    # PrivateUse1 device, as torch.cuda.FloatStorage for CUDA; the file expects the CPU's
    # classes for every device but CUDA.
    "test_tensor_storage_type_tpu": "it expects torch.<T>Storage; tpu's are torch.tpu.<T>Storage",
    # The file takes bfloat16 addbmm to be unsupported on any device but the CPU without
    # CUDA's sm53 (`SM53OrLater`) and expects it to raise.
    "TestLinalgTPU::test_addbmm_tpu_bfloat16": "it expects bfloat16 addbmm to raise off CUDA",
    # Off the CPU the file expects CUDA's refusal of lstsq drivers other than gels; tpu
    # takes the CPU's drivers and refuses others in the CPU's words.
    "test_linalg_lstsq_input_checks_tpu": "it expects CUDA's lstsq driver message off the CPU",
    # CPU and CUDA copy non-contiguous operands of searchsorted and warn that they do; tpu
    # reads them in place and has nothing to warn about.
    "TestReductionsTPU::test_bucketization_tpu": "it expects a warning about copying strided operands",
    # Off the CPU the file expects CUDA's bit patterns for the undefined integer x % 0.
    "test_fmod_remainder_by_zero_integral_tpu": "it expects CUDA's bit patterns for x % 0",
    # Kolmogorov-Smirnov tests of 1,000 16-bit draws whose thresholds the CPU's own draws
    # exceed: over 30 seeds the CPU measured up to 0.308 for log_normal_(7, 7) in float16
    # (threshold 0.3) and 0.113 for cauchy_(50, 0.5) in bfloat16 (threshold 0.1); tpu's
    # draws, of the same distributions, 0.323 and 0.119.
    "test_lognormal_kstest_tpu_float16": "a KS threshold the CPU's float16 draws exceed too",
    "test_cauchy_kstest_tpu_bfloat16": "a KS threshold the CPU's bfloat16 draws exceed too",
    # The tests compare complex scatter products with the same products made one by one
    # by mul_ on the device, exactly. XLA contracts complex products into fused
    # multiply-adds where its code generator finds them, in a scatter's loop and in an
    # elementwise product differently: an ulp apart. CUDA leaves complex out of them.
    "test_scatter__reductions_tpu_complex64": "exact complex products (CUDA skips complex)",
    "test_scatter_reduce_prod_tpu_complex": "exact complex products (CUDA skips complex)",
    # unique(dim=) of rows holding NaN: the CPU sorts rows with a comparator for which NaN
    # is neither less nor greater than anything, no strict weak order, and the test expects
    # what std::sort's insertion sort makes of it on six rows (the input's order). tpu sorts
    # rows by a total order, NaN last, as torch.sort and unique() without dim do.
    "TestSortAndSelectTPU::test_unique_dim_tpu": "it expects std::sort's order of NaN rows",
}

# Tests that expect a check of data (an out-of-range index, a source smaller than the mask)
# to raise at the call, as on the CPU: the tpu device checks data where it reads it and
# raises at the next synchronization, as CUDA's device asserts do (the tests skip or leave
# out CUDA for that reason). They run in
# the ``debug`` eager mode (``TPU_LAUNCH_BLOCKING=1``), which waits for every launch, as
# CUDA's tests would under ``CUDA_LAUNCH_BLOCKING=1``.
LAUNCH_BLOCKING = (
    "test_trivial_fancy_out_of_bounds",
    "TestIndexingTPU::test_advancedindex_",
    "::test_masked_scatter_tpu_",
    "::test_one_hot_tpu",
    "::test_embedding_bag_out_of_bounds_idx_",
)


def _install_renamed_helpers() -> None:
    """Names the test files import that PyTorch has renamed or removed since they were
    written (each the same helper under its old name)."""
    import torch.testing._internal.common_cuda as common_cuda
    import torch.testing._internal.common_methods_invocations as cmi
    import torch.testing._internal.common_nn as common_nn
    import torch.testing._internal.common_utils as common_utils
    from torch.testing._internal.opinfo.core import DecorateInfo

    import torch

    # torch._C.has_mkldnn became torch.backends.mkldnn.is_available().
    if not hasattr(torch._C, "has_mkldnn"):
        torch._C.has_mkldnn = torch.backends.mkldnn.is_available()
    # skipIfMps became skipIfMPS.
    if not hasattr(common_utils, "skipIfMps"):
        common_utils.skipIfMps = common_utils.skipIfMPS
    # tf32_is_not_fp32 (whether CUDA matmuls may run in TF32) was removed; tpu has no TF32.
    if not hasattr(common_cuda, "tf32_is_not_fp32"):
        common_cuda.tf32_is_not_fp32 = lambda: False
    # binary_ufuncs_and_refs: the binary ufuncs of op_db and of python_ref_db.
    if not hasattr(cmi, "binary_ufuncs_and_refs"):
        cmi.binary_ufuncs_and_refs = tuple(
            op for op in cmi.op_db + cmi.python_ref_db if isinstance(op, cmi.BinaryUfuncInfo)
        )
    # foreach_lerp_op_db: the _foreach_lerp entry, now in foreach_other_op_db.
    if not hasattr(cmi, "foreach_lerp_op_db"):
        cmi.foreach_lerp_op_db = [
            op for op in cmi.foreach_other_op_db if op.name == "_foreach_lerp"
        ]
    # new_module_tests became a function.
    if not hasattr(common_nn, "new_module_tests"):
        common_nn.new_module_tests = common_nn.get_new_module_tests()
    # test_binary_ufuncs.py's TestBinaryUfuncs became TestBinaryUfuncsDevice, and op_db's
    # decorators (PyTorch's own skips, expected failures and tolerances for every device)
    # name the new class: they apply to the old one under its old name.
    renamed_classes = {"TestBinaryUfuncs": "TestBinaryUfuncsDevice"}
    is_active = DecorateInfo.is_active

    def is_active_under_new_name(self, cls_name, *args, **kwargs):
        return is_active(self, renamed_classes.get(cls_name, cls_name), *args, **kwargs)

    DecorateInfo.is_active = is_active_under_new_name


def _stand_in_for_sibling_files() -> None:
    """test_autograd imports test classes from files of PyTorch's test/autograd/ folder,
    which a folder of top-level test files lacks: empty classes stand in for them (their
    tests are absent from the run; the rest of the file runs)."""
    import sys
    import types
    import unittest

    for module, names in {
        "autograd.test_complex": ["TestAutogradComplex"],
        "autograd.test_functional": ["TestAutogradFunctional"],
    }.items():
        if module in sys.modules:
            continue
        try:
            __import__(module)
        except ImportError:
            package = sys.modules.setdefault("autograd", types.ModuleType("autograd"))
            stand_in = types.ModuleType(module)
            for name in names:
                setattr(stand_in, name, type(name, (unittest.TestCase,), {}))
            sys.modules[module] = stand_in
            setattr(package, module.split(".")[1], stand_in)


def _restore_generic_class_super() -> None:
    """The files were written when an instantiated class (TestLinalgTPU) did not inherit
    from its generic class (TestLinalg) but copied its methods, so a generic ``setUp`` could
    call ``super(self.__class__, self).setUp()`` (test_linalg does). Since PyTorch 2.2 the
    generic class is a base, and that call re-enters the same ``setUp`` forever, on every
    device. The tpu base class gives such a re-entry what it reached then: the ``setUp``
    (``tearDown``) of the classes after the generic one."""
    from torch.testing._internal.common_device_type import DeviceTypeTestBase, PrivateUse1TestBase

    def shim(name: str):
        def method(self):
            if getattr(self, f"_suite_in_{name}", False):
                mro = type(self).__mro__
                generic = next(c for c in mro[1:] if not issubclass(c, DeviceTypeTestBase))
                return getattr(super(generic, self), name)()
            setattr(self, f"_suite_in_{name}", True)
            try:
                return getattr(super(PrivateUse1TestBase, self), name)()
            finally:
                setattr(self, f"_suite_in_{name}", False)

        return method

    PrivateUse1TestBase.setUp = shim("setUp")
    PrivateUse1TestBase.tearDown = shim("tearDown")


def _tolerate_cpu_redefinitions() -> None:
    """test_nn and test_torch define a CPU-only ``test_x_cpu`` beside a CUDA-only ``test_x``,
    whose CPU instance has the same name: PyTorch now refuses the second at collection, so
    the CPU could not run any test of the files. On the CPU the first definition stays."""
    from torch.testing._internal.common_device_type import CPUTestBase

    instantiate = CPUTestBase.instantiate_test.__func__

    def instantiate_test(cls, name, test, *, generic_cls=None):
        try:
            instantiate(cls, name, test, generic_cls=generic_cls)
        except AssertionError as error:
            if "Redefinition of test" not in str(error):
                raise

    CPUTestBase.instantiate_test = classmethod(instantiate_test)


def pytest_configure(config) -> None:
    global _CONTROLLER
    _CONTROLLER = not hasattr(config, "workerinput")
    import torch  # autoloads torch_tpu
    from torch.testing._internal import common_device_type

    # Classes named TestViewOpsTPU instead of ...PRIVATEUSE1.
    common_device_type.PrivateUse1TestBase.device_type = torch._C._get_privateuse1_backend_name()
    _install_renamed_helpers()
    _restore_generic_class_super()
    _stand_in_for_sibling_files()
    _tolerate_cpu_redefinitions()
    config._suite_deadline = time.monotonic() + float(
        os.environ.get("TORCH_TPU_SUITE_DEADLINE", "inf")
    )


def _sample(items: list, every: int) -> list:
    """A fixed 1/``every`` of each file's tests, at least 3: those whose names hash lowest."""
    by_file: dict[str, list] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::")[0], []).append(item)
    kept = set()
    for tests in by_file.values():
        tests.sort(key=lambda item: zlib.crc32(item.nodeid.encode()))
        kept.update(id(item) for item in tests[: max(3, -(-len(tests) // every))])
    return [item for item in items if id(item) in kept]


@pytest.hookimpl(trylast=True)  # after -k: the sample is of the tests that run
def pytest_collection_modifyitems(config, items) -> None:
    every = int(os.environ.get("TORCH_TPU_SUITE_SAMPLE", "0") or 0)
    only = os.environ.get("TORCH_TPU_SUITE_ONLY")
    if every > 1 or only:
        # The runner's CPU re-run names tests in a file ("only"): some a device has no
        # instance of (onlyCUDA on the CPU), which as pytest arguments would stop the run.
        wanted = set(open(only).read().split()) if only else None
        kept = _sample(items, every) if every > 1 else items
        kept = [i for i in kept if wanted is None or i.nodeid in wanted]
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept
    for item in items:
        for pattern, reason in BY_DESIGN.items():
            if pattern in item.nodeid:
                item.add_marker(pytest.mark.skip(reason=f"by design: {reason}"))
                break


_CONTROLLER = True  # pytest_configure says; a worker's reports reach the controller


def _record(line: dict) -> None:
    path = os.environ.get("TORCH_TPU_SUITE_RESULTS")
    if path and _CONTROLLER:
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


def pytest_collectreport(report) -> None:
    # A file that cannot be collected (an import it lacks): one error, the file's name.
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash else str(report.longrepr).strip().splitlines()[-1]
        _record({"test": report.nodeid, "outcome": "error", "seconds": 0, "message": message})


def _compile_counters() -> tuple[int, float]:
    import torch_tpu

    m = torch_tpu.metrics()
    return m["compiles"], m["compile_seconds"]


def _reached_sparse(call) -> bool:
    """Whether a test failed where it made a sparse tensor on tpu (the dispatcher has
    no Sparse kernel for the device, or tpu refused a sparse result)."""
    error = call.excinfo
    if error is None or not error.errisinstance(NotImplementedError):
        return False
    message = str(error.value)
    return ("Sparse" in message and "backend" in message) or _SPARSE in message


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # Each test's compiles travel with its report (from an xdist worker too): where a
    # file's time goes.
    if call.when == "setup":
        item._suite_compiles = _compile_counters()
    outcome = yield
    if call.when == "call" and _reached_sparse(call):
        # Tests that loop over sparse=True among other settings: by design, as the
        # tests skipped by name (their dense settings ran before).
        report = outcome.get_result()
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1], f"{_SPARSE}: the test reached one")
    if call.when == "call" and hasattr(item, "_suite_compiles"):
        count, seconds = _compile_counters()
        report = outcome.get_result()
        report.user_properties.append(("compiles", count - item._suite_compiles[0]))
        report.user_properties.append(
            ("compile_seconds", round(seconds - item._suite_compiles[1], 3))
        )


def pytest_runtest_logreport(report) -> None:
    failed_setup = report.when != "call" and report.failed
    if report.when != "call" and not failed_setup and not report.skipped:
        return
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        outcome, message = "skipped", str(reason)
    elif report.failed:
        outcome = "error" if failed_setup else "failed"
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash else str(report.longrepr).splitlines()[-1]
    else:
        outcome, message = "passed", ""
    _record(
        {
            "test": report.nodeid,
            "outcome": outcome,
            "seconds": round(report.duration, 3),
            "message": message[:2000],
            **dict(report.user_properties),
        }
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if not any(name in item.nodeid for name in LAUNCH_BLOCKING):
        yield
        return
    import torch_tpu.eager

    with torch_tpu.eager.eager_mode("debug"):
        yield


def pytest_runtest_protocol(item, nextitem):
    if time.monotonic() > item.config._suite_deadline:
        item.session.shouldstop = "the file's time limit was reached"
    return None
