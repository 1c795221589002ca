"""Names other projects import from Google's TorchTPU (``torch_tpu._internal``), built on
our own mechanisms: a compatibility surface, documented in docs/kernels.md. Helion's
Pallas launcher (1.5.1) imports ``pallas.pallas.JaxCallable``, ``jax_placeholder``,
``pallas.tpu_torch_pallas`` and ``utils.hardware.get_tpu_device_name``."""
