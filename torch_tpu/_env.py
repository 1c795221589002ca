"""Settings read from environment variables when torch_tpu is imported.

``import torch`` imports this package (backend autoload), so a typo in a variable must
not make the import fail: a bad value is warned about at import, is not applied, and
``torch.tpu._lazy_init()`` (which PyTorch calls before the first tpu tensor is created)
raises it as a ``ValueError``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence

_problems: list[str] = []


def choice(name: str, accepted: Sequence[str]) -> str | None:
    """The value of environment variable ``name`` as spelt in ``accepted`` (case does
    not matter); None when it is unset, empty or not one of them."""
    raw = os.environ.get(name)
    if not raw:
        return None
    for value in accepted:
        if raw.lower() == value.lower():
            return value
    problem = f"{name}={raw!r} is not one of {', '.join(accepted)}"
    _problems.append(problem)
    warnings.warn(
        f"{problem}; it is ignored, and the first use of a tpu device raises this error",
        stacklevel=2,
    )
    return None


def check() -> None:
    """Raises the problems of the environment variables read at import, if any."""
    if _problems:
        raise ValueError("; ".join(_problems))
