"""``torch.tpu.FloatStorage`` and the other legacy typed-storage classes, as ``torch.cuda``
has them: what ``Tensor.storage_type()`` of a tpu tensor is, and what old code builds."""

from __future__ import annotations

import torch
from torch._utils import classproperty
from torch.storage import _LegacyStorage, _warn_typed_storage_removal

# The dtypes torch.cuda has legacy storage classes for.
_DTYPES = (
    torch.uint8, torch.double, torch.float, torch.half, torch.long, torch.int, torch.short,
    torch.int8, torch.bool, torch.bfloat16, torch.cdouble, torch.cfloat,
)  # fmt: skip


class _TpuLegacyStorage(_LegacyStorage):
    @classmethod
    def from_buffer(cls, *args, **kwargs):
        _warn_typed_storage_removal()
        raise RuntimeError("from_buffer: Not available for tpu storage")

    @classmethod
    def _new_with_weak_ptr(cls, *args, **kwargs):
        raise RuntimeError("_new_with_weak_ptr: Not available for tpu storage")

    @classmethod
    def _new_shared_filename(cls, manager, obj, size, *, device=None, dtype=None):
        raise RuntimeError("_new_shared_filename: Not available for tpu storage")


def _storage_class(name: str, dtype: torch.dtype) -> type:
    def public_dtype(cls):
        _warn_typed_storage_removal()
        return dtype

    # torch.storage reads the device of a legacy class from its module's last name.
    namespace = {
        "__module__": "torch.tpu",
        "dtype": classproperty(public_dtype),
        "_dtype": classproperty(lambda cls: dtype),
    }
    return type(name, (_TpuLegacyStorage,), namespace)


def install(module) -> None:
    names = torch.storage._dtype_to_storage_type_map()
    for dtype in _DTYPES:
        cls = _storage_class(names[dtype], dtype)
        setattr(module, cls.__name__, cls)
        torch._storage_classes.add(cls)
