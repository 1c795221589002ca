"""Which PJRT plugin runs the ``tpu`` device: platform selection and plugin discovery.

``TORCH_TPU_PLATFORM=auto|tpu|cuda|cpu`` picks the platform (``auto``: the first of
tpu, cuda, cpu that has hardware); ``TORCH_TPU_PLUGIN=/path/plugin.so`` overrides the
search. Nothing here loads a plugin: that happens on first device use.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from dataclasses import dataclass

PLATFORMS = ("tpu", "cuda", "cpu")


@dataclass(frozen=True)
class Selection:
    platform: str
    plugin: str | None  # None: no plugin package found
    reason: str  # how the plugin was found, or why not


def _package_dir(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(iter(spec.submodule_search_locations))


def _find_tpu_plugin() -> str | None:
    path = os.environ.get("TPU_LIBRARY_PATH")
    if path and os.path.isfile(path):
        return path
    pkg = _package_dir("libtpu")
    if pkg:
        found = sorted(glob.glob(os.path.join(pkg, "libtpu*.so")))
        if found:
            return found[0]
    return None


def _find_cuda_plugin() -> str | None:
    pkg = _package_dir("jax_plugins")
    if not pkg:
        return None
    for version in ("xla_cuda13", "xla_cuda12"):
        path = os.path.join(pkg, version, "xla_cuda_plugin.so")
        if os.path.isfile(path):
            return path
    return None


def _find_cpu_plugin() -> str | None:
    pkg = _package_dir("lammps_jax_pjrt_cpu")
    if pkg:
        path = os.path.join(pkg, "pjrt_c_api_cpu_plugin.so")
        if os.path.isfile(path):
            return path
    pkg = _package_dir("xla_plugins")
    if pkg:
        path = os.path.join(pkg, "xla_cpu_pjrt", "xla_cpu_pjrt.so")
        if os.path.isfile(path):
            return path
    return None


_FINDERS = {"tpu": _find_tpu_plugin, "cuda": _find_cuda_plugin, "cpu": _find_cpu_plugin}


def _has_hardware(platform: str) -> bool:
    if platform == "tpu":
        return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))
    if platform == "cuda":
        return os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl")
    return True


def select() -> Selection:
    """Never raises: a configuration problem is reported when the device is first used,
    so that ``import torch`` (which autoloads this backend) keeps working."""
    requested = os.environ.get("TORCH_TPU_PLATFORM", "auto").strip().lower() or "auto"
    if requested not in PLATFORMS + ("auto",):
        return Selection(
            "cpu", None, f"TORCH_TPU_PLATFORM={requested!r} is not one of auto, tpu, cuda, cpu"
        )
    override = os.environ.get("TORCH_TPU_PLUGIN")
    if requested == "auto":
        candidates = [p for p in PLATFORMS if _has_hardware(p) and _FINDERS[p]()]
        platform = candidates[0] if candidates else "cpu"
    else:
        platform = requested
    if override:
        if not os.path.isfile(override):
            return Selection(platform, None, f"TORCH_TPU_PLUGIN={override} does not exist")
        return Selection(platform, override, "TORCH_TPU_PLUGIN")
    plugin = _FINDERS[platform]()
    if plugin is None:
        hint = {
            "tpu": "pip install libtpu (or set TPU_LIBRARY_PATH)",
            "cuda": "pip install jax-cuda13-pjrt",
            "cpu": "pip install lammps-jax-pjrt-cpu",
        }[platform]
        return Selection(platform, None, f"no PJRT plugin for {platform}: {hint}")
    return Selection(platform, plugin, "installed package")


# What JAX loads before its CUDA plugin (jax_plugins/xla_cuda13), from the nvidia-*
# wheels' folders (nvidia/<package>/lib): the plugin asks for them by name, and cuDNN
# and NVRTC do not find their own companions there.
_CUDA_LIBRARIES = (
    ("cu13", "libcudart.so.13"),
    ("cu13", "libnvrtc.so.13"),
    ("cu13", "libcublas.so.13"),
    ("cu13", "libcublasLt.so.13"),
    ("nccl", "libnccl.so.2"),
    ("cu13", "libcupti.so.13"),
    ("cu13", "libcusparse.so.12"),
    ("cu13", "libcusolver.so.12"),
    ("cu13", "libcufft.so.12"),
    ("nvshmem", "libnvshmem_host.so.3"),
    ("cudnn", "libcudnn.so.9"),
)


def cuda_libraries() -> list[str]:
    """Paths of the CUDA libraries that the backend loads just before the CUDA plugin
    (only found here: loading them at import would touch every CUDA user's process)."""
    dirs = {package: _package_dir(f"nvidia.{package}") for package, _ in _CUDA_LIBRARIES}
    paths = [
        os.path.join(dirs[package], "lib", name)
        for package, name in _CUDA_LIBRARIES
        if dirs[package] is not None
    ]
    return [p for p in paths if os.path.isfile(p)]
