"""tpu_dist: collectives against Gloo, DDP, FSDP2, DTensor, DCP, failures, launch env.

Multi-process checks run in groups started by dist_launch.run_group (one process per
device, torchrun's variables); each group runs many checks in the same processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from dist_launch import check_group, run_group

import torch_tpu
from torch_tpu.distributed import environment
from torch_tpu.distributed.environment import ADDRESSES, TOPOLOGY, launch_env

# ---------------------------------------------------------------- collectives


@pytest.mark.parametrize("world_size", [2, 4])
def test_every_collective_matches_gloo(world_size):
    results = check_group(run_group("collectives", world_size, timeout=150))
    assert all(r["checks"] > 300 for r in results), [r["checks"] for r in results]


# ---------------------------------------------------------------- training


def test_ddp_and_fsdp2_match_one_process_and_dtensor_works():
    """DDP on 2 ranks equals one process on the full batch; FSDP2 equals DDP."""
    check_group(run_group("training", 2, timeout=180))


def test_ddp_at_4_ranks_and_a_checkpoint_saved_at_4_loads_at_2(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    check_group(run_group("training", 4, timeout=180, args={"skip_fsdp": True, "dcp_dir": ckpt}))
    check_group(run_group("dcp_load", 2, timeout=120, args={"dir": ckpt}))


# ---------------------------------------------------------------- multi-process clients

NOT_FOUND = 5  # PJRT_Error_Code


def test_pjrt_key_value_callbacks_over_a_tcp_store():
    """The callbacks a multi-process PJRT client (GPU, TPU) exchanges its topology through,
    over the c10d store: a get waits for a peer's put (another process), a missing key is
    NOT_FOUND after the timeout, a try_get of a missing key is NOT_FOUND at once."""
    import time
    from datetime import timedelta

    from torch_tpu import _C

    server = dist.TCPStore("127.0.0.1", 0, 3, True, timedelta(seconds=30), wait_for_workers=False)
    worker = str(Path(__file__).with_name("kv_store_worker.py"))
    procs = [
        subprocess.Popen([sys.executable, worker, str(r), str(server.port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in range(2)
    ]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert outs[0][0].split() == ["(0,", "'')"], outs[0]
    assert outs[1][0].strip() == "0 'bytes\\x00\\x01' True", outs[1]
    assert server.get("pjrt/local_topology/0") == b"bytes\x00\x01"
    start = time.monotonic()
    assert _C._key_value_callbacks(server, "pjrt/", "get", "missing", "", 300) == (NOT_FOUND, "")
    assert time.monotonic() - start < 5
    assert _C._key_value_callbacks(server, "pjrt/", "try_get", "missing", "", 0) == (NOT_FOUND, "")
    assert _C._key_value_callbacks(server, "pjrt/", "try_get", "local_topology/0", "", 0) == (
        0,
        "bytes\x00\x01",
    )


# ---------------------------------------------------------------- launchers


@pytest.mark.parametrize("nproc", [2, 4])
def test_torchrun_ranks_select_their_device_by_local_rank(nproc, tmp_path):
    # DeviceMesh and torch.accelerator.set_device_index(LOCAL_RANK) before any tpu op: each
    # process holds one device, tpu:0, which its LOCAL_RANK names too.
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         f"--nproc_per_node={nproc}", str(Path(__file__).with_name("launcher_worker.py"))],
        env=dict(os.environ, TORCH_TPU_LOCK_DIR=str(tmp_path / "locks"), RESULTS_DIR=str(tmp_path)),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ranks = [(tmp_path / f"rank{r}").read_text() for r in range(nproc)]
    assert ranks == [f"OK rank {r} on tpu:0" for r in range(nproc)]


# ---------------------------------------------------------------- failures


def test_a_timeout_and_a_dead_peer_raise_within_bounded_time():
    outcomes = run_group("faults", 2, timeout=90, args={"sleep": 10})
    assert outcomes[1].returncode == 0, outcomes[1].log[-3000:]
    result = check_group(outcomes[:1])[0]
    assert result["timeout_seconds"] < 3 + 4, (
        result
    )  # the 3 s timeout set, not the peer dying at 10 s
    assert result["wait_timeout_seconds"] < 1 + 2, result  # work.wait(timeout=1 s)
    assert result["peer_death_seconds"] < 15, result  # the peer dies ~6 s later
    assert "tpu_dist all_reduce failed" in result["peer_death_message"], result


# ---------------------------------------------------------------- one process per device


def test_two_processes_of_one_local_rank_get_a_clear_error(tmp_path):
    code = (
        "import sys, torch\n"
        "torch.ones(1, device='tpu').cpu()\n"
        "print('READY', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    env = dict(os.environ, LOCAL_RANK="1", TORCH_TPU_LOCK_DIR=str(tmp_path))
    holder = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "READY"
        second = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            input="",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode != 0
        assert f"in use by process {holder.pid}" in second.stderr, second.stderr[-2000:]
        assert "host device 1 of LOCAL_RANK 1" in second.stderr, second.stderr[-2000:]
    finally:
        holder.communicate("\n", timeout=60)


# ---------------------------------------------------------------- launch environment


def torchrun_env(**extra):
    return {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.2", **extra}


def test_launch_env_is_derived_from_torchrun_variables():
    env = launch_env(environ=torchrun_env(MASTER_PORT="1234"))
    assert (env.rank, env.world_size, env.local_rank) == (1, 4, 1)
    assert env.topology == (2, 2, 1)
    assert env.addresses == tuple(f"10.0.0.2:{1235 + r}" for r in range(4))
    assert env.derived


def test_launch_env_reads_the_topology_variables():
    env = launch_env(environ=torchrun_env(**{TOPOLOGY: "1,2,1,2", ADDRESSES: "a:1,b:2,c:3,d:4"}))
    assert env.topology == (1, 2, 1, 2)
    assert env.addresses == ("a:1", "b:2", "c:3", "d:4")
    assert not env.derived


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({TOPOLOGY: "2,2,2"}, "TORCH_TPU_TOPOLOGY='2,2,2' describes 8 devices but WORLD_SIZE=4"),
        ({TOPOLOGY: "4"}, "TORCH_TPU_TOPOLOGY='4' is not 3 or 4 comma-separated"),
        ({TOPOLOGY: "2,x,1"}, "TORCH_TPU_TOPOLOGY='2,x,1' is not 3 or 4"),
        ({ADDRESSES: "a:1,b:2"}, "has 2 addresses but WORLD_SIZE=4"),
        ({ADDRESSES: "a:1,b:2,c,d:4"}, "'c' is not host:port"),
        ({"RANK": "4"}, "RANK=4 is not below WORLD_SIZE=4"),
        ({"WORLD_SIZE": "four"}, "WORLD_SIZE='four' is not an integer"),
        ({"LOCAL_RANK": "2"}, "LOCAL_RANK=2 must be between 0 and RANK=1"),
    ],
)
def test_inconsistent_launch_variables_raise_value_error(extra, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        launch_env(environ=torchrun_env(**extra))


def test_launch_env_checks_init_process_group_arguments():
    with pytest.raises(ValueError, match="world_size=2 but WORLD_SIZE=4"):
        launch_env(world_size=2, environ=torchrun_env())
    with pytest.raises(ValueError, match="rank=0 but RANK=1"):
        launch_env(rank=0, environ=torchrun_env())
    assert launch_env(rank=0, world_size=3, environ={}).topology == (1, 3, 1)


def test_set_tpu_launch_env_sets_a_consistent_environment():
    environ = {}
    values = torch.tpu.distributed.set_tpu_launch_env(nproc_per_node=4, environ=environ)
    assert environ == values
    assert values[TOPOLOGY] == "2,2,1"
    addresses = values[ADDRESSES].split(",")
    assert len(addresses) == 4 and len(set(addresses)) == 4
    assert all(a.startswith("localhost:") for a in addresses)
    for rank in range(4):
        env = launch_env(
            environ=dict(environ, RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(rank))
        )
        assert env.topology == (2, 2, 1) and not env.derived
    assert environment.grid_topology(8) == (2, 4, 1)
    with pytest.raises(ValueError, match="at least 1"):
        torch.tpu.distributed.set_tpu_launch_env(nproc_per_node=0, environ={})
    with pytest.raises(TypeError, match="must be an int"):
        torch.tpu.distributed.set_tpu_launch_env(nproc_per_node="4", environ={})


def test_environment_cli_prints_export_lines():
    run = subprocess.run(
        [sys.executable, "-m", "torch.tpu.distributed.environment", "--nproc_per_node=2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    assert lines[0] == f"export {TOPOLOGY}=1,2,1", lines
    assert lines[1].startswith(f"export {ADDRESSES}=localhost:"), lines
    assert len(lines[1].split("=", 1)[1].split(",")) == 2
    assert "RuntimeWarning" not in run.stderr, run.stderr


def test_environment_cli_rejects_a_bad_count(capsys):
    with pytest.raises(SystemExit) as exit_info:
        environment._main(["--nproc_per_node=0"])
    assert exit_info.value.code == 2
    assert "at least 1" in capsys.readouterr().err


# ---------------------------------------------------------------- in this process (world size 1)


@pytest.fixture
def launch_vars(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", TOPOLOGY, ADDRESSES):
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch
    if dist.is_initialized():
        dist.destroy_process_group()


def test_init_process_group_with_device_id_picks_tpu_dist(launch_vars):
    # PyTorch requires an index in device_id; every rank's device is tpu:0.
    store = dist.HashStore()
    dist.init_process_group(device_id=torch.device("tpu:0"), store=store, rank=0, world_size=1)
    assert dist.get_backend() == "tpu_dist"
    t = torch.arange(4.0, device="tpu")
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    group = dist.new_group()
    dist.all_reduce(t, group=group)
    assert t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    dist.barrier()


def test_init_process_group_rejects_an_inconsistent_topology(launch_vars):
    launch_vars.setenv(TOPOLOGY, "2,2,1")
    with pytest.raises(ValueError, match="describes 4 devices but WORLD_SIZE=1"):
        dist.init_process_group(
            "tpu_dist", store=dist.HashStore(), rank=0, world_size=1, timeout=timedelta(seconds=10)
        )
    assert not dist.is_initialized()


def test_torch_tpu_distributed_is_the_package():
    import torch.tpu.distributed.environment as env_module

    assert torch.tpu.distributed is torch_tpu.distributed
    assert env_module.set_tpu_launch_env.__name__ == "set_tpu_launch_env"
    assert "tpu_dist" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["tpu_dist"] == ["tpu", "cpu"]
