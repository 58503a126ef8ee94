"""A tier is exactly its GPU: the NVML names and memory of real cards each land on their own tier or are refused,
so an SXM card is never filed under a PCIe card's name and price."""

from __future__ import annotations

import pytest

from experiments.cluster.tiers import cpu_tiers_for, known_tiers, tier_gpu_problem, tiers_for_gpu
from experiments.config.errors import ConfigError

# (NVML name, total memory in MiB as NVML reports it, the tier it is; None: no tier is that card)
REAL_CARDS = [
    ("NVIDIA A100-SXM4-80GB", 81920, "a100"),
    ("NVIDIA A100-SXM4-40GB", 40960, "a100_40gb"),
    ("NVIDIA A100-PCIE-40GB", 40960, None),
    ("NVIDIA A100 80GB PCIe", 81920, None),
    ("NVIDIA H100 80GB HBM3", 81559, "h100_sxm"),
    ("NVIDIA H100 PCIe", 81559, "h100"),
    ("NVIDIA H100 NVL", 95830, "h100_nvl"),
    ("NVIDIA H200", 143771, "h200"),
    ("NVIDIA H200 NVL", 143771, None),
    ("NVIDIA L4", 23034, "l4"),
    ("Tesla T4", 15360, "t4"),
    ("NVIDIA A10G", 23028, "a10g"),
    ("NVIDIA L40S", 46068, "l40s"),
    ("NVIDIA GeForce RTX 4090", 24564, "rtx4090"),
    ("NVIDIA RTX 6000 Ada Generation", 49140, None),
]


@pytest.mark.parametrize(("name", "memory_mib", "tier"), REAL_CARDS)
def test_each_real_card_lands_on_its_own_tier_or_none(name: str, memory_mib: int, tier: str | None) -> None:
    assert tiers_for_gpu([name], [memory_mib]) == ([tier] if tier else [])
    assert tiers_for_gpu([name.upper().replace(" ", "  ")], [memory_mib]) == ([tier] if tier else []), \
        "case and spacing aside"


def test_every_gpu_tier_names_its_gpu_exactly() -> None:
    for name, tier in known_tiers().items():
        assert not tier.requires_gpu or tier.gpu_names, f"{name} has no gpu_names"
        assert all(len(n.split()) >= 2 for n in tier.gpu_names), f"{name}: a vendor and a model, not a fragment"


def test_a_card_of_another_tier_is_refused_naming_the_tier_it_is() -> None:
    tiers = known_tiers()
    problem = tier_gpu_problem(tiers["h100"], ["NVIDIA H100 80GB HBM3"], [81559])
    assert problem.startswith("tier h100 (NVIDIA H100 PCIe) needs a GPU named 'NVIDIA H100 PCIe' with 78-81 GiB")
    assert "this node has GPU 'NVIDIA H100 80GB HBM3' (79.6 GiB); it is a node of tier h100_sxm" in problem
    unknown = tier_gpu_problem(tiers["h100"], ["NVIDIA RTX 6000 Ada Generation"], [49140])
    assert "no tier in conf/gpu/ has it: add its NVML name to a tier's gpu_names" in unknown
    assert tier_gpu_problem(tiers["h100_sxm"], ["NVIDIA H100 80GB HBM3"], [81559]) is None
    assert tier_gpu_problem(tiers["c7i_2xlarge"], [], []) is None, "a CPU tier needs no GPU"


def test_a_cpu_tier_is_a_node_of_its_cpus_and_no_gpu() -> None:
    tiers = known_tiers()
    cpu = tiers["c7i_2xlarge"]
    assert tier_gpu_problem(cpu, [], [], cpu_count=8) is None
    assert tier_gpu_problem(cpu, [], [], cpu_count=2).endswith("is a CPU node of 8 logical CPUs, and this node has 2")
    with_gpu = tier_gpu_problem(cpu, ["NVIDIA L4"], [23034], cpu_count=8)
    assert "its GPU variants would be priced as a CPU node" in with_gpu
    assert cpu_tiers_for(8) == ["c7i_2xlarge"] and cpu_tiers_for(2) == [] and cpu_tiers_for(8, ["NVIDIA L4"]) == []
    assert tier_gpu_problem(tiers["local"], [], [], cpu_count=3) is None, "local is any machine"


def test_a_gpu_machine_is_never_priced_as_the_cpu_vm_local_stands_for() -> None:
    """`local` is any machine, priced by default as a 2-vCPU CPU VM: a node with a GPU no tier lists (an RTX A6000,
    an L40, a B200) is refused there until the machine's own price is given, naming both fixes."""
    import dataclasses

    local = known_tiers()["local"]
    problem = tier_gpu_problem(local, ["NVIDIA RTX A6000"], [49140], cpu_count=32)
    assert "priced as a CPU machine" in problem and "'NVIDIA RTX A6000'" in problem
    assert "gpu.price_per_hour_usd=USD" in problem and "conf/gpu/<tier>.yaml" in problem
    priced = dataclasses.replace(local, price_per_hour_usd=0.79, price_source="my A6000 box")
    assert tier_gpu_problem(priced, ["NVIDIA RTX A6000"], [49140], cpu_count=32) is None
    shared = known_tiers()["local_shared2"]
    assert "priced as a CPU machine" in tier_gpu_problem(shared, ["NVIDIA RTX A6000"], [49140])


def test_the_right_name_with_the_wrong_memory_is_not_the_tier_and_unknown_memory_is_not_held_against_it() -> None:
    tiers = known_tiers()
    assert tiers_for_gpu(["NVIDIA H200"], [97871]) == []  # a 96 GB card under the H200's name: not the H200 tier
    assert "with 139-142 GiB" in tier_gpu_problem(tiers["h200"], ["NVIDIA H200"], [97871])
    assert tiers_for_gpu(["NVIDIA H200"]) == ["h200"], "memory unknown (an older record): the name decides"


def test_a_tier_file_with_the_old_substring_patterns_is_refused_with_the_fix(tmp_path) -> None:
    (tmp_path / "mine.yaml").write_text("name: mine\ndisplay_name: Mine\nprice_per_hour_usd: 1.0\n"
                                        "gpu_name_patterns: [\"A100\"]\n")
    with pytest.raises(ConfigError, match=r"gpu_name_patterns=\(\['A100'\]\) is no longer read: .* gpu_names"):
        known_tiers(tmp_path)
