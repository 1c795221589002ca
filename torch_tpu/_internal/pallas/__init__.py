"""TorchTPU's ``torch_tpu._internal.pallas``: JAX functions (Pallas kernels among them)
called on tpu tensors."""

from torch_tpu._internal.pallas import tpu_torch_pallas
from torch_tpu._internal.pallas.pallas import JaxCallable, jax_placeholder

__all__ = ["JaxCallable", "jax_placeholder", "tpu_torch_pallas"]
