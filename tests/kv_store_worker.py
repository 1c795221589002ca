"""A process of test_pjrt_key_value_callbacks_over_a_tcp_store: rank 1 reads through the
PJRT key-value callbacks what rank 0 puts through them, after a delay."""

import sys
import time
from datetime import timedelta

import torch.distributed as dist

from torch_tpu import _C

rank, port = int(sys.argv[1]), int(sys.argv[2])
store = dist.TCPStore("127.0.0.1", port, 2, False, timedelta(seconds=30))
if rank == 0:
    time.sleep(1.0)
    print(_C._key_value_callbacks(store, "pjrt/", "put", "local_topology/0", "bytes\x00\x01", 0))
else:
    start = time.monotonic()
    code, value = _C._key_value_callbacks(store, "pjrt/", "get", "local_topology/0", "", 20000)
    waited = time.monotonic() - start
    print(code, repr(value), waited >= 0.5)
