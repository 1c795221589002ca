"""tpu_dist collectives inside device programs, in a world of ranks as threads of one
process, each on its own device of a client of that many devices (thread_world.py): every
collective and point-to-point message against the values the CPU computes, in strict and
defer_and_fuse eager and in torch.compile graphs; DDP and FSDP2 training against one
device; a rank that issues another collective, or none, ends in an error in every rank,
never a hang."""

from __future__ import annotations

import pytest
from thread_world import check_world, run_world


def test_every_collective_in_programs_matches_the_cpu():
    result = check_world(run_world("collectives", 4, timeout=600))
    for mode, counts in result["counts"].items():
        assert counts["staged_collectives"] == 0, mode
        assert counts["program_collectives"] > 1000, mode


def test_compiled_functional_collectives_run_in_the_graphs_program():
    result = check_world(run_world("compiled", 4, timeout=600))
    assert result["programs_per_call"] == 1


def test_ddp_and_fsdp2_over_four_ranks_equal_one_device():
    check_world(run_world("training", 4, timeout=600))


def test_a_compiled_sharded_training_step_is_one_program_per_rank():
    result = check_world(run_world("compiled_fsdp", 4, timeout=600))
    assert set(result["programs_per_rank"].values()) == {1}, result["programs_per_rank"]


def test_a_compiled_ddp_step_is_one_program_per_rank_with_its_all_reduces():
    result = check_world(run_world("compiled_fsdp", 4, timeout=600, args={"form": "ddp"}))
    assert set(result["programs_per_rank"].values()) == {1}, result["programs_per_rank"]


@pytest.mark.parametrize("world", [2, 3])
def test_groups_of_other_sizes(world):
    args = {"world": world, "modes": ["strict"]}
    check_world(run_world("collectives", world, timeout=600, args=args))


def test_a_different_or_missing_collective_fails_every_rank_within_the_timeout():
    result = check_world(run_world("faults", 4, timeout=300))
    assert all(t < 1 for k, t in result["seconds"].items() if k.startswith("different")), result
