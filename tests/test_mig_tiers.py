"""MIG slices as tiers: NVML's MIG mode and MIG devices read through a fake `pynvml` (never a GPU), a slice tier's
identity and its refusals (MIG off, other slices, no slice pinned, a whole card in MIG mode), the slice tiers' prices
as their share of the card's, their checks, the params their trials log, and the report's slice-against-card
section. Nothing here ran on a MIG device: NVML is faked as its documentation and nvidia-smi's output describe it."""

from __future__ import annotations

import re
import sys
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from experiments.cluster.tiers import known_tiers, tier_gpu_problem, tiers_for_gpu
from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.prices import Price, cost_per_1k_images
from experiments.config.shares import card_names, share_params, slices_per_card
from experiments.config.validation import validate
from experiments.report.data import SweepData, TierInfo, tier_infos
from experiments.report.render import Document
from experiments.report.slices_section import share_text, slices_section
from runners.doctor import default_tier, diagnose, mig_detail
from runners.node import NodeSetupError, detect_tier
from serving.node import GpuInventory, MigDevice, MigState, NodeInfo, gpu_ids, nvml_gpus

H100 = "NVIDIA H100 80GB HBM3"
H100_MIB = 81559
SLICE_1G, SLICE_3G = f"{H100} MIG 1g.10gb", f"{H100} MIG 3g.40gb"
# Slice memory as nvidia-smi reports it on an H100 80GB HBM3: 1g.10gb 9984 MiB, 3g.40gb 40320 MiB.
ONE_G = [MigDevice(0, SLICE_1G, 9984, f"MIG-1g-{n}") for n in range(7)]
THREE_G = [MigDevice(0, SLICE_3G, 40320, "MIG-3g-a"), MigDevice(0, SLICE_3G, 40320, "MIG-3g-b")]


class NVMLError(Exception):
    pass


class NVMLError_NotFound(NVMLError):  # noqa: N801 - pynvml's names
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801
    pass


class FakeNvml:
    """pynvml as far as `serving.node.nvml_gpus` calls it. Each GPU: (name, memory MiB or None where NVML refuses,
    MIG: None where not supported, else a list of slots, each None (empty) or (name, memory MiB, uuid))."""

    NVMLError, NVMLError_NotFound, NVMLError_NotSupported = NVMLError, NVMLError_NotFound, NVMLError_NotSupported
    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, gpus: list[tuple[str, int | None, list | None]]) -> None:
        self.gpus = gpus

    def nvmlInit(self) -> None:  # noqa: N802
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        pass

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple:  # noqa: N802
        return ("gpu", index)

    def _slot(self, handle: tuple) -> tuple:
        return self.gpus[handle[1]][2][handle[2]]

    def nvmlDeviceGetName(self, handle: tuple) -> bytes:  # noqa: N802
        name = self.gpus[handle[1]][0] if handle[0] == "gpu" else self._slot(handle)[0]
        return name.encode()  # older nvidia-ml-py returns bytes

    def nvmlDeviceGetMemoryInfo(self, handle: tuple) -> Any:  # noqa: N802
        mib = self.gpus[handle[1]][1] if handle[0] == "gpu" else self._slot(handle)[1]
        if mib is None:
            raise NVMLError("Insufficient Permissions")
        return SimpleNamespace(total=mib << 20, used=0)

    def nvmlDeviceGetMigMode(self, handle: tuple) -> list[int]:  # noqa: N802
        mig = self.gpus[handle[1]][2]
        if mig is None:
            raise NVMLError_NotSupported("Not Supported")
        on = int(bool(mig) or mig == [])
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: tuple) -> int:  # noqa: N802
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: tuple, index: int) -> tuple:  # noqa: N802
        slots = self.gpus[handle[1]][2] or []
        if index >= len(slots) or slots[index] is None:
            raise NVMLError_NotFound("Not Found")
        return ("mig", handle[1], index)

    def nvmlDeviceGetUUID(self, handle: tuple) -> str:  # noqa: N802
        return self._slot(handle)[2]

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return "580.65.06"

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        return 13000


def _fake(monkeypatch: pytest.MonkeyPatch, gpus: list, visible: str | None = None) -> GpuInventory:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpus))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    return nvml_gpus()


def test_nvml_reports_mig_mode_and_each_mig_device_skipping_empty_indices(monkeypatch: pytest.MonkeyPatch) -> None:
    slots = [(SLICE_1G, 9984, "MIG-aaa"), None, (SLICE_3G, 40320, "MIG-bbb"), None]
    gpus = _fake(monkeypatch, [(H100, H100_MIB, slots), ("NVIDIA L4", 23034, None), (H100, H100_MIB, False)],
                 visible="MIG-aaa")
    assert gpus.names == (H100, "NVIDIA L4", H100) and gpus.memory_mib == (H100_MIB, 23034, H100_MIB)
    assert gpus.mig_enabled == (True, False, False), "an L4 has no MIG (NotSupported); the third card has it off"
    assert gpus.mig_devices == (MigDevice(0, SLICE_1G, 9984, "MIG-aaa"), MigDevice(0, SLICE_3G, 40320, "MIG-bbb"))
    assert [d.profile for d in gpus.mig_devices] == ["1g.10gb", "3g.40gb"]
    assert gpus.visible_devices == ("MIG-aaa",) and gpus.mig.pins_slices
    assert gpus.mig.seen == (gpus.mig_devices[0],) and gpus.device_names == (SLICE_1G,)
    assert gpus.cuda_version == "13.0" and gpus.problem is None


def test_a_container_given_one_slice_sees_its_card_without_memory_and_that_slice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = _fake(monkeypatch, [(H100, None, [None, None, (SLICE_1G, 9984, "MIG-ccc")])])
    assert gpus.memory_mib == (None,) and gpus.mig_enabled == (True,) and gpus.visible_devices is None
    assert gpus.mig.pinned, "the node's only slice is the one it computes on"
    assert tiers_for_gpu(gpus.names, gpus.memory_mib, mig=gpus.mig) == ["h100_sxm_1g10gb"]
    assert tier_gpu_problem(known_tiers()["h100_sxm_1g10gb"], gpus.names, gpus.memory_mib, mig=gpus.mig) is None


def test_a_whole_card_without_mig_reads_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = _fake(monkeypatch, [(H100, H100_MIB, False)])
    assert gpus.mig_devices == () and gpus.device_names == (H100,)
    assert tiers_for_gpu(gpus.names, gpus.memory_mib, mig=gpus.mig) == ["h100_sxm"]


def _node(devices: list[MigDevice], visible: str | None = None, enabled: bool = True) -> NodeInfo:
    return NodeInfo("mig-box", "10.0.0.9", "n9", "Some CPU", 16, gpu_names=(H100,), gpu_memory_mib=(H100_MIB,),
                    gpu_mig_enabled=(enabled,), mig_devices=tuple(devices),
                    visible_devices=None if visible is None else tuple(visible.split(",")), driver_version="580.65.06",
                    cuda_version="13.0")


def _problem(tier: str, node: NodeInfo) -> str | None:
    return tier_gpu_problem(known_tiers()[tier], node.gpu_names, node.gpu_memory_mib, mig=node.mig)


def test_a_slice_tier_is_a_node_pinned_to_a_slice_of_its_name_and_memory() -> None:
    node = _node([*ONE_G[:3], *THREE_G], visible="MIG-1g-1")
    assert _problem("h100_sxm_1g10gb", node) is None
    assert tiers_for_gpu(node.gpu_names, node.gpu_memory_mib, mig=node.mig) == ["h100_sxm_1g10gb"]
    assert default_tier(node.gpu_names, node.gpu_memory_mib, node.mig) == "h100_sxm_1g10gb"
    assert detect_tier(node.gpu_names, node.gpu_memory_mib, node.mig) == "h100_sxm_1g10gb"
    assert node.gpu_name == SLICE_1G, "the trials' gpu_name is the slice's"
    on_3g = _node([*ONE_G[:3], *THREE_G], visible="MIG-3g-b")
    assert default_tier(on_3g.gpu_names, on_3g.gpu_memory_mib, on_3g.mig) == "h100_sxm_3g40gb"
    small = _node([MigDevice(0, SLICE_1G, 4864, "MIG-x")])  # the right name with another card's slice memory
    assert "its 1g.10gb slice of GPU 0 ('NVIDIA H100 80GB HBM3 MIG 1g.10gb') has 4.8 GiB" in _problem(
        "h100_sxm_1g10gb", small)


def test_the_right_card_with_mig_off_is_refused_with_how_to_enable_it() -> None:
    problem = _problem("h100_sxm_1g10gb", _node([], enabled=False))
    assert problem == (
        "tier h100_sxm_1g10gb (NVIDIA H100 SXM 80GB MIG 1g.10gb, 1/7 of the card) needs a MIG slice named "
        "'NVIDIA H100 80GB HBM3 MIG 1g.10gb' with 9-10.5 GiB, and MIG is not enabled on GPU 0 (NVIDIA H100 80GB "
        "HBM3): enable it with `sudo nvidia-smi -i 0 -mig 1`, create the slice with `sudo nvidia-smi mig -i 0 -cgi "
        "1g.10gb -C`, and start the node with CUDA_VISIBLE_DEVICES=MIG-<uuid> from `nvidia-smi -L`; it is a node "
        "of tier h100_sxm")


def test_mig_mode_with_other_slices_names_the_slices_there_and_their_tier() -> None:
    problem = _problem("h100_sxm_1g10gb", _node(THREE_G, visible="MIG-3g-a"))
    assert "this node's processes see MIG slice MIG-3g-a (3g.40gb of GPU 0) only (CUDA_VISIBLE_DEVICES=MIG-3g-a)" \
        in problem and problem.endswith("; it is a node of tier h100_sxm_3g40gb")
    unpinned = _problem("a100_1g10gb", _node(THREE_G))
    assert "needs a MIG slice named 'NVIDIA A100-SXM4-80GB MIG 1g.10gb'" in unpinned, "another card: its name"
    problem = _problem("h100_sxm_1g10gb", _node(THREE_G[:1]))
    assert ("GPU 0 (NVIDIA H100 80GB HBM3) is in MIG mode with slices 3g.40gb, none of them 1g.10gb: create one "
            "with `sudo nvidia-smi mig -i 0 -cgi 1g.10gb -C` where the card has room") in problem
    assert problem.endswith("; it is a node of tier h100_sxm_3g40gb")
    empty = _problem("h100_sxm_1g10gb", _node([]))
    assert "is in MIG mode with no slices yet: create one" in empty
    with pytest.raises(NodeSetupError, match=r"is in MIG mode and it has no MIG slice, so it is no tier's in "):
        detect_tier((H100,), (H100_MIB,), MigState(enabled=(True,)))
    stale = _problem("h100_sxm_1g10gb", _node(ONE_G[:2], visible="MIG-gone"))
    assert "CUDA_VISIBLE_DEVICES=MIG-gone names no MIG device of this node: start the node with CUDA_VISIBLE_DEVICES " \
           "naming a 1g.10gb slice's UUID (MIG-1g-0, MIG-1g-1)" in stale


def test_a_slice_among_several_unpinned_is_refused_naming_the_uuid_to_pin() -> None:
    node = _node([*ONE_G[:2], *THREE_G])
    problem = _problem("h100_sxm_1g10gb", node)
    assert ("this node has 4 MIG devices (1g.10gb x 2, 3g.40gb x 2) with CUDA_VISIBLE_DEVICES naming none of them, "
            "so which slice its servers would get is not known: start the node with CUDA_VISIBLE_DEVICES=MIG-1g-0 "
            "(a 1g.10gb slice of GPU 0; `nvidia-smi -L` lists them)") in problem
    with pytest.raises(NodeSetupError, match=r"matches tiers \['h100_sxm_1g10gb', 'h100_sxm_3g40gb'\]: pass --tier "
                                             r"to choose one \(a card in MIG mode: start the node with "
                                             r"CUDA_VISIBLE_DEVICES=MIG-<uuid> of one slice"):
        detect_tier(node.gpu_names, node.gpu_memory_mib, node.mig)


def test_a_whole_card_tier_on_a_card_in_mig_mode_is_refused_naming_the_slice_tier() -> None:
    problem = _problem("h100_sxm", _node(ONE_G, visible="MIG-1g-3"))
    assert problem.startswith("tier h100_sxm (NVIDIA H100 SXM 80GB) needs a GPU named 'NVIDIA H100 80GB HBM3' with "
                              "78-81 GiB, and GPU 0 (NVIDIA H100 80GB HBM3) is in MIG mode, partitioned into 1g.10gb "
                              "x 7: its servers would run on one slice while the figures were priced as the whole "
                              "card; disable MIG with `sudo nvidia-smi -i 0 -mig 0` to measure the whole card")
    assert problem.endswith("; it is a node of tier h100_sxm_1g10gb")
    assert tier_gpu_problem(known_tiers()["h100_sxm"], [H100], [H100_MIB]) is None, "no MIG said: as before"


def test_the_doctor_names_the_slice_tier_and_the_slices() -> None:
    node = _node([*ONE_G[:2], THREE_G[0]], visible="MIG-3g-a")
    assert mig_detail(node) == "; GPU 0 in MIG mode: 1g.10gb x 2, 3g.40gb; this node computes on MIG-3g-a (3g.40gb)"
    assert mig_detail(_node(ONE_G[:2])).endswith("CUDA_VISIBLE_DEVICES names no slice (start the node with "
                                                 "CUDA_VISIBLE_DEVICES=MIG-<uuid>)")
    assert diagnose(node, "h100_sxm_3g40gb").tier_problem is None
    assert "MIG mode" in diagnose(node, "h100_sxm").tier_problem


def test_gpu_ids_from_ray_keep_a_mig_uuid() -> None:
    assert gpu_ids(["0", 1, "MIG-5068167e-8438"]) == [0, 1, "MIG-5068167e-8438"] and gpu_ids(None) == []
    assert MigState(visible=("MIG-50",), devices=(MigDevice(0, SLICE_1G, 9984, "MIG-5068167e"),)).seen, \
        "CUDA takes a UUID's first characters"


def test_the_triton_engine_cache_is_named_after_the_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    from serving.triton.host import _gpu_name

    _fake(monkeypatch, [(H100, H100_MIB, [(SLICE_1G, 9984, "MIG-aaa"), (SLICE_3G, 40320, "MIG-bbb")])])
    assert _gpu_name(["MIG-bbb"]) == SLICE_3G and _gpu_name([0]) == H100


SLICES = ("h100_sxm_1g10gb", "h100_sxm_3g40gb", "a100_1g10gb")
SHARED_CARDS = ("h100_sxm_shared2", "local_shared2")  # cards shared by two servers at once (test_shared_cards)


def test_each_slice_tier_is_priced_at_its_share_of_its_cards_price() -> None:
    tiers = known_tiers()
    shipped = sorted(name for name, tier in tiers.items() if tier.share_of)
    assert shipped == sorted(SLICES + SHARED_CARDS)
    for name in shipped:
        tier = tiers[name]
        card = tiers[tier.share_of]
        assert abs(tier.price_per_hour_usd - tier.gpu_share * card.price_per_hour_usd) <= 0.01, name
        assert tier.price_seen == card.price_seen, f"{name}: the card's price, seen when the card's was"
        assert f"of tier {card.name}'s ${card.price_per_hour_usd:g}/h" in tier.price_source, name
        assert card.price_source.split(" (")[0].split(",")[0] in tier.price_source, f"{name}: the card's source"
        assert share_text(tier.gpu_share) in tier.price_source and share_text(tier.gpu_share) in tier.display_name
        assert card_names(tier) == card.gpu_names, f"{name}: a slice of its card's name"
        validate(load_config([f"gpu={name}"]))
    assert [share_text(tiers[n].gpu_share) for n in SLICES] == ["1/7", "3/7", "1/7"]
    assert [slices_per_card(tiers[n].gpu_share) for n in SLICES] == [7, 2, 7]


@pytest.mark.parametrize(("overrides", "message"), [
    (["gpu=h100_sxm_1g10gb", "gpu.gpu_share=0"], "gpu.gpu_share=0.0 is not allowed: the share of one card the tier is, "
                                                 "in (0, 1]"),
    (["gpu=h100_sxm_1g10gb", "gpu.gpu_share=1.5"], "gpu.gpu_share=1.5 is not allowed"),
    (["gpu=h100_sxm_1g10gb", "gpu.mig_profile=1g10gb"], "gpu.mig_profile='1g10gb' is not allowed: a MIG profile as "
                                                        "`nvidia-smi -L` names the slice, e.g. 1g.10gb"),
    (["gpu=h100_sxm_1g10gb", "gpu.mig_profile=2g.20gb"], "gpu.gpu_names=['NVIDIA H100 80GB HBM3 MIG 1g.10gb'] is not "
                                                         "allowed: a MIG slice's NVML names are its card's with ' MIG "
                                                         "2g.20gb'"),
    (["gpu=h100_sxm", "gpu.gpu_names=[NVIDIA H100 80GB HBM3 MIG 1g.10gb]"],
     "gpu.mig_profile=None is not allowed: gpu.gpu_names name MIG devices"),
    (["gpu=h100_sxm_1g10gb", "gpu.share_of=null"], "gpu.share_of=None is not allowed: a share of a card (0.142857) "
                                                   "names the card's tier"),
    (["gpu=h100_sxm_1g10gb", "gpu.share_of=b200"], "gpu.share_of='b200' is not allowed: the tier of the whole card"),
    (["gpu=h100_sxm_1g10gb", "gpu.share_of=h100_sxm_3g40gb"], "gpu.share_of='h100_sxm_3g40gb' is not allowed: a whole "
                                                              "card's tier"),
    (["gpu=h100_sxm_1g10gb", "gpu.share_of=a100"], "gpu.share_of='a100' is not allowed: its card's NVML names "
                                                   "['NVIDIA A100-SXM4-80GB'] are not those"),
])
def test_a_bad_share_is_refused_naming_the_key_and_the_fix(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(load_config(overrides))


def test_a_slice_tiers_trials_log_its_share_and_a_whole_cards_do_not() -> None:
    from experiments.plan import plan_trials
    from experiments.run.trial import new_record

    cfg = load_config(["gpu=h100_sxm_1g10gb"])
    node = _node(ONE_G[:1])
    record = new_record(cfg, plan_trials(cfg)[0].trials[0], node)
    assert {k: record.params[k] for k in ("gpu_share", "mig_profile", "share_of", "gpu_name",
                                           "price_per_hour_usd")} == {
        "gpu_share": 0.14285714, "mig_profile": "1g.10gb", "share_of": "h100_sxm", "gpu_name": SLICE_1G,
        "price_per_hour_usd": 0.57}
    assert share_params(load_config(["gpu=h100_sxm"]).gpu) == {}
    local = load_config(["gpu=local"])
    whole = new_record(local, plan_trials(local)[0].trials[0], node)
    assert "gpu_share" not in whole.params


def _point(tier: str, stack: str, img_s: float, p99: float, usd_per_hour: float) -> dict[str, Any]:
    return {"tier": tier, "status": "ok", "stack": stack, "variant": stack.split("/")[0], "protocol": "grpc",
            "batch_size": 8, "load": "c8", "throughput_img_s": img_s, "latency_p50_ms": p99 / 2,
            "latency_p99_ms": p99, "unstable": False, "overloaded": False, "marks": "",
            "cost_per_1k_images_usd": cost_per_1k_images(usd_per_hour, img_s)}


def _sweep(slice_img_s: float = 500.0) -> SweepData:
    trials = pd.DataFrame([_point("h100_sxm", "triton_trt/grpc/tensor", 2800.0, 12.0, 3.99),
                           _point("h100_sxm", "pytorch/grpc/tensor", 1500.0, 9.0, 3.99),
                           _point("h100_sxm_1g10gb", "triton_trt/grpc/tensor", slice_img_s, 30.0, 0.57),
                           _point("h100_sxm_1g10gb", "pytorch/grpc/tensor", 250.0, 20.0, 0.57)])
    tiers = {"h100_sxm": TierInfo("h100_sxm", prices=[Price("primary", 3.99)]),
             "h100_sxm_1g10gb": TierInfo("h100_sxm_1g10gb", prices=[Price("primary", 0.57)], gpu_share=1 / 7,
                                         mig_profile="1g.10gb", share_of="h100_sxm")}
    return SweepData("s", "0", None, trials, tiers)


def test_the_report_sets_each_slice_against_its_whole_card() -> None:
    doc = Document("t")
    lines = slices_section(doc, _sweep(), {"h100_sxm": "h100_sxm", "h100_sxm_1g10gb": "h100_sxm_1g10gb"})
    text = doc.to_markdown()
    assert "# Slices and shared cards" in text and "h100_sxm_1g10gb (1g.10gb, 1/7)" in text
    assert "h100_sxm_1g10gb · triton_trt/grpc/tensor · b8 · c8" in text and "$0.57 (1/7 of $3.99)" in text
    slice_cost, card_cost = cost_per_1k_images(0.57, 500.0), cost_per_1k_images(3.99, 2800.0)
    assert lines == [f"MIG slice h100_sxm_1g10gb: ${slice_cost:.3g} per 1k images against ${card_cost:.3g} on the "
                     "whole card (h100_sxm), the slice is cheaper; 5.6 slices serve the card's throughput (the "
                     "card's 7 slices together would serve 1.2x the whole card's)"]
    assert "5.6 (a card holds 7)" in text
    doc = Document("t")
    lines = slices_section(doc, _sweep(), {"h100_sxm": "h100_sxm", "h100_sxm_1g10gb": "h100_sxm_1g10gb"},
                           slo_p99_ms=25.0)
    assert "h100_sxm_1g10gb · pytorch/grpc/tensor" in doc.to_markdown() and "with p99 ≤ 25 ms" in doc.to_markdown()
    assert "11.2 slices serve the card's throughput (more than a card holds: the whole card serves more than its " \
           "slices together)" in lines[0]
    doc = Document("t")
    assert slices_section(doc, _sweep(), {}, slo_p99_ms=5.0) == []
    assert "Not compared: h100_sxm_1g10gb against h100_sxm: no point of h100_sxm_1g10gb and h100_sxm with p99 ≤ 5 " \
           "ms" in doc.to_markdown()


def test_a_sweep_without_a_slice_and_its_card_has_no_such_section() -> None:
    data = _sweep()
    data.tiers = {"h100_sxm_1g10gb": data.tiers["h100_sxm_1g10gb"]}
    data.trials = data.trials[data.trials["tier"] == "h100_sxm_1g10gb"]
    doc = Document("t")
    assert slices_section(doc, data, {}) == [] and "Slices and shared cards" not in doc.to_markdown()


def test_the_report_reads_a_tiers_share_from_its_params() -> None:
    tier_runs = pd.DataFrame([{"params.gpu_tier": "h100_sxm_1g10gb", "params.price_per_hour_usd": "0.57",
                               "params.gpu_share": "0.14285714", "params.mig_profile": "1g.10gb",
                               "params.share_of": "h100_sxm", "tags.emulated": "false"}])
    trials = pd.DataFrame([{"tier": "h100_sxm_1g10gb", "emulated": False}, {"tier": "h100_sxm", "emulated": False,
                                                                            "price_per_hour_usd": 3.99}])
    infos = tier_infos(tier_runs, trials)
    assert (infos["h100_sxm_1g10gb"].gpu_share, infos["h100_sxm_1g10gb"].share_of) == (0.14285714, "h100_sxm")
    assert (infos["h100_sxm"].gpu_share, infos["h100_sxm"].share_of, infos["h100_sxm"].mig_profile) == (1.0, "", "")
    no_tier_run = tier_infos(pd.DataFrame(), pd.DataFrame([{"tier": "a100_1g10gb", "emulated": False,
                                                             "gpu_share": "0.14285714", "mig_profile": "1g.10gb",
                                                             "share_of": "a100"}]))
    assert no_tier_run["a100_1g10gb"].share_of == "a100" and no_tier_run["a100_1g10gb"].mig_profile == "1g.10gb"
