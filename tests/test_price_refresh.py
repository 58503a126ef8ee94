"""`python -m runners.prices`: tier prices from gpuhunt's catalog, against tests/data/gpuhunt/20261120-7/ (three
provider CSVs in gpuhunt's exact schema, made up for these tests: test values, not prices; see its README.md). Every
run writes into a copy of conf/gpu; nothing here touches the network or starts a server."""

from __future__ import annotations

import os
import re
import shutil
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from experiments.prices.catalog import filter_offers, query_gpuhunt, read_catalog
from experiments.prices.errors import PriceRefreshError
from experiments.prices.refresh import refresh
from experiments.prices.tier_files import EditError, edit_tier_text, load_tiers
from runners.prices import main
from serving.paths import REPO_ROOT

CATALOG = REPO_ROOT / "tests" / "data" / "gpuhunt"
VERSION = "20261120-7"
DAY = "2026-11-20"


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    """A copy of the repository's conf/ (the tier files under gpu/)."""
    shutil.copytree(REPO_ROOT / "conf", tmp_path / "conf")
    return tmp_path / "conf"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def prices_of(conf: Path, tier: str) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.load(conf / "gpu" / f"{tier}.yaml"))


def refreshed(conf: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code, out, err = run(capsys, "--catalog", CATALOG, "--conf-dir", conf / "gpu", "--write", *args)
    assert code == 0, err
    return out


def test_offers_land_on_the_tier_of_their_card_with_provider_source_and_day(
        conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refreshed(conf, capsys)
    l4 = prices_of(conf, "l4")["prices"]
    assert l4["gpuhunt_on_demand"] == {
        "usd_per_hour": 0.44, "kind": "on_demand", "provider": "RunPod", "seen": DAY,
        "source": f"gpuhunt catalog runpod {VERSION} (runpod.csv): NVIDIA L4 in US-IL-1, 1x L4 24 GB, "
                  f"on-demand $0.44/h"}
    assert l4["runpod_on_demand"]["usd_per_hour"] == 0.78, "the hand-typed prices stay"
    # The SXM card gets the SXM offers, the PCIe card the PCIe ones: gpuhunt calls both `H100 80 GB`.
    assert prices_of(conf, "h100_sxm")["prices"]["gpuhunt_on_demand"]["source"].startswith(
        f"gpuhunt catalog runpod {VERSION} (runpod.csv): NVIDIA H100 80GB HBM3 in EU-RO-1")
    assert prices_of(conf, "h100")["prices"]["gpuhunt_on_demand"]["usd_per_hour"] == 2.39  # RunPod "NVIDIA H100 PCIe"
    a100 = prices_of(conf, "a100")["prices"]["gpuhunt_on_demand"]
    assert (a100["usd_per_hour"], a100["provider"]) == (1.49, "RunPod"), "not the cheaper A100 80GB PCIe"
    assert prices_of(conf, "h100_nvl")["prices"]["gpuhunt_on_demand"]["usd_per_hour"] == 2.59
    # A CPU tier: its 8 vCPUs on the instance type it names (c7i.2xlarge), not another 8-vCPU one.
    c7i = prices_of(conf, "c7i_2xlarge")["prices"]
    assert c7i["gpuhunt_on_demand"]["usd_per_hour"] == 0.357 and "c7i.2xlarge in us-east-1" in \
        c7i["gpuhunt_on_demand"]["source"]
    assert "prices" not in prices_of(conf, "local"), "a CPU tier of any machine has no catalog identity"
    assert prices_of(conf, "l4")["price_per_hour_usd"] == 0.8048, "the primary price changes only with --primary"


def test_a_multi_gpu_offer_is_priced_per_gpu_and_single_gpu_offers_come_first(
        conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = refreshed(conf, capsys, "--tiers", "a100_40gb,h100_sxm,l4")
    a100 = prices_of(conf, "a100_40gb")["prices"]
    assert a100["gpuhunt_on_demand"]["usd_per_hour"] == round(21.958 / 8, 5)  # p4d.24xlarge: 8x A100 40 GB
    assert "p4d.24xlarge in us-east-1, 8x A100 40 GB, on-demand $21.958/h for the instance, one GPU's share" in \
        a100["gpuhunt_on_demand"]["source"]
    assert a100["gpuhunt_spot"]["usd_per_hour"] == 1.5
    # h100_sxm: on demand, RunPod's single GPU ($2.69) rather than a share of an 8-GPU node (Lambda's $2.99, AWS's
    # $6.88) or of a RunPod cluster ($1.99, not an hourly node); spot has only AWS's p5.48xlarge: $24 / 8.
    sxm = prices_of(conf, "h100_sxm")["prices"]
    assert (sxm["gpuhunt_on_demand"]["usd_per_hour"], sxm["gpuhunt_spot"]["usd_per_hour"]) == (2.69, 3.0)
    assert prices_of(conf, "l4")["prices"]["gpuhunt_on_demand"]["usd_per_hour"] == 0.44  # not g6.12xlarge's share
    assert "left out: 1 offer whose instance type does not say which card (lambdalabs gpu_1x_a100)" in out


def test_spot_offers_become_the_interruptible_price_and_on_demand_ones_the_on_demand_price(
        conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refreshed(conf, capsys, "--tiers", "l4,t4,h100")
    spot = prices_of(conf, "l4")["prices"]["gpuhunt_spot"]
    assert (spot["usd_per_hour"], spot["kind"], spot["provider"]) == (0.35, "interruptible", "AWS")
    assert "g6.xlarge in us-west-2, 1x L4 24 GB, spot $0.35/h" in spot["source"]
    t4 = prices_of(conf, "t4")["prices"]
    assert (t4["gpuhunt_on_demand"]["usd_per_hour"], t4["gpuhunt_spot"]["usd_per_hour"]) == (0.526, 0.211)
    assert "gpuhunt_spot" not in prices_of(conf, "h100")["prices"], "no spot offer of an H100 PCIe: none written"


def test_provider_and_region_filters_choose_the_offers(conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refreshed(conf, capsys, "--tiers", "l4", "--provider", "aws", "--region", "us-east-1")
    l4 = prices_of(conf, "l4")["prices"]
    assert l4["gpuhunt_on_demand"]["usd_per_hour"] == 0.805 and "gpuhunt_spot" not in l4  # the spot is in us-west-2
    offers = filter_offers(read_catalog(CATALOG), ["runpod"])
    assert offers and {o.provider for o in offers} == {"runpod"}
    assert not [o for o in offers if "runpod-cluster" in o.flags], "a cluster of pods is no node by the hour"


def test_pinned_prices_and_a_pinned_primary_are_left_alone(conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    l4 = conf / "gpu" / "l4.yaml"
    l4.write_text(l4.read_text() + "  gpuhunt_on_demand:\n    usd_per_hour: 0.5\n    kind: reserved\n"
                                   "    source: my own contract\n    seen: 2026-10-01\n    pinned: true\n")
    sxm = conf / "gpu" / "h100_sxm.yaml"
    sxm.write_text(sxm.read_text().replace("requires_gpu: true", "price_pinned: true  # our own H100s\n"
                                                                 "requires_gpu: true"))
    before = sxm.read_text()
    out = refreshed(conf, capsys, "--tiers", "l4,h100_sxm", "--primary")
    mine = prices_of(conf, "l4")["prices"]["gpuhunt_on_demand"]
    assert mine == {"usd_per_hour": 0.5, "kind": "reserved", "source": "my own contract", "seen": "2026-10-01",
                    "pinned": True}
    assert prices_of(conf, "l4")["prices"]["gpuhunt_spot"]["usd_per_hour"] == 0.35, "the unpinned one is refreshed"
    assert prices_of(conf, "l4")["price_per_hour_usd"] == 0.44, "--primary: the on-demand offer"
    assert "runpod.csv" in prices_of(conf, "l4")["price_source"] and prices_of(conf, "l4")["price_seen"] == DAY
    after = prices_of(conf, "h100_sxm")
    assert (after["price_per_hour_usd"], after["price_seen"]) == (3.99, "2026-11-09"), "price_pinned: true"
    assert after["prices"]["gpuhunt_on_demand"]["usd_per_hour"] == 2.69
    assert sxm.read_text().startswith(before.split("prices:")[0]), "nothing above its prices changed"
    assert re.search(r"gpuhunt_on_demand +\$0\.5/h +\$0\.44/h +pinned: its entry says pinned: true", out), out
    assert re.search(r"primary +\$3\.99/h +\$2\.69/h +pinned: the tier says price_pinned: true", out), out


def test_a_card_gpuhunt_cannot_tell_apart_is_left_alone_with_the_reason(
        conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Lambda's gpu_1x_a100 is gpuhunt's `A100 40 GB`: SXM4 or PCIe, its instance type does not say.
    before = (conf / "gpu" / "a100_40gb.yaml").read_text()
    out = refreshed(conf, capsys, "--tiers", "a100_40gb", "--provider", "lambdalabs")
    assert (conf / "gpu" / "a100_40gb.yaml").read_text() == before
    assert ("left alone: ambiguous card: gpuhunt names 'NVIDIA A100-SXM4-40GB' and 'NVIDIA A100-PCIE-40GB' alike "
            "(A100 40 GB), and the instance types of its offers do not say SXM (lambdalabs gpu_1x_a100); not priced "
            "as the other card") in out
    # A GPU the mapping does not know: left alone, saying where to add it.
    (conf / "gpu" / "b200.yaml").write_text("defaults:\n  - base_gpu\nname: b200\ndisplay_name: NVIDIA B200\n"
                                             "price_per_hour_usd: 6.0\ngpu_names: [\"NVIDIA B200\"]\n")
    out = refreshed(conf, capsys, "--tiers", "b200")
    assert "left alone: no gpuhunt name for its GPU 'NVIDIA B200': add the card to CARDS" in out
    assert "nothing to change" in out


def test_a_dry_run_writes_nothing_and_shows_the_diff(conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = {p.name: p.read_bytes() for p in (conf / "gpu").iterdir()}
    code, out, _ = run(capsys, "--catalog", CATALOG, "--conf-dir", conf / "gpu", "--primary")
    assert code == 0
    assert {p.name: p.read_bytes() for p in (conf / "gpu").iterdir()} == before
    assert "+  gpuhunt_spot:\n+    usd_per_hour: 0.35\n+    kind: interruptible\n" in out
    assert "\n-price_per_hour_usd: 0.8048\n" in out and "\n+price_per_hour_usd: 0.44\n" in out
    assert "dry run: 12 tier file(s) would change, nothing written; run again with --write to apply" in out
    code, out, _ = run(capsys, "--catalog", CATALOG, "--conf-dir", conf / "gpu", "--dry-run", "--tiers", "l4")
    assert code == 0 and "dry run: 1 tier file(s)" in out
    assert {p.name: p.read_bytes() for p in (conf / "gpu").iterdir()} == before


def test_the_rewritten_tier_keeps_its_comments_and_composes_and_validates(
        conf: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import experiments.config.compose as compose
    from experiments.config.prices import tier_prices
    from experiments.config.validation import validate

    tiers = ("a100", "c7i_2xlarge", "t4")
    old = {t: (conf / "gpu" / f"{t}.yaml").read_text() for t in tiers}
    refreshed(conf, capsys, "--tiers", ",".join(tiers), "--primary")
    for tier in tiers:
        new = (conf / "gpu" / f"{tier}.yaml").read_text()
        comments = [line for line in old[tier].splitlines() if line.lstrip().startswith("#")]
        assert comments == [line for line in new.splitlines() if line.lstrip().startswith("#")]
        assert new.startswith(old[tier].split("price_per_hour_usd")[0])
    monkeypatch.setattr(compose, "CONF_DIR", conf)
    cfg = compose.load_config(["gpu=c7i_2xlarge"])
    validate(cfg)
    prices = {p.name: p for p in tier_prices(cfg.gpu)}
    assert prices["primary"].usd_per_hour == 0.357 and prices["gpuhunt_spot"].kind == "interruptible"
    assert prices["gpuhunt_spot"].seen == DAY and prices["gpuhunt_spot"].provider == "AWS"
    cfg = compose.load_config(["gpu=a100"])
    validate(cfg)
    assert {p.name for p in tier_prices(cfg.gpu)} == {"primary", "runpod_spot", "runpod_on_demand",
                                                       "gpuhunt_on_demand"}


def test_the_text_edit_changes_only_its_keys() -> None:
    text = ("defaults:\n  - base_gpu\nname: x\nprice_per_hour_usd: 1.0  # what we pay\nprice_seen: 2026-01-01\n"
            "# the alternatives\nprices: {}\ngpu_names: [\"NVIDIA L4\"]\n")
    new = edit_tier_text(text, [(("price_per_hour_usd",), 0.5), (("price_source",), "a: b # c"),
                                (("prices", "gpuhunt_spot", "usd_per_hour"), 0.2),
                                (("prices", "gpuhunt_spot", "seen"), "2026-11-20")])
    assert new == ("defaults:\n  - base_gpu\nname: x\nprice_per_hour_usd: 0.5  # what we pay\n"
                   "price_source: \"a: b # c\"\nprice_seen: 2026-01-01\n# the alternatives\nprices:\n"
                   "  gpuhunt_spot:\n    usd_per_hour: 0.2\n    seen: 2026-11-20\ngpu_names: [\"NVIDIA L4\"]\n")
    flow = ("name: x\nprices:\n    a: {usd_per_hour: 1}\n    # mine\n    b:\n        usd_per_hour: 2\n"
            "        kind: spot\n")
    new = edit_tier_text(flow, [(("prices", "a", "usd_per_hour"), 3.0), (("prices", "b", "usd_per_hour"), 4.0)])
    assert new == ("name: x\nprices:\n    a:\n        usd_per_hour: 3.0\n    # mine\n    b:\n"
                   "        usd_per_hour: 4.0\n        kind: spot\n")
    with pytest.raises(EditError, match="flow style"):
        edit_tier_text("prices: {a: {usd_per_hour: 1}}\n", [(("prices", "b", "usd_per_hour"), 1.0)])


def test_a_catalog_zip_a_version_in_the_path_the_file_date_and_seen(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "aws" / "20261121-9"
    folder.mkdir(parents=True)
    with zipfile.ZipFile(folder / "catalog.zip", "w") as archive:  # as gpuhunt publishes it: aws.csv inside
        archive.write(CATALOG / VERSION / "aws.csv", "aws.csv")
    catalog = read_catalog(folder / "catalog.zip")
    (file,) = catalog.files
    assert (file.provider, file.version, file.seen, file.name, file.offers) == (
        "aws", "20261121-9", "2026-11-21", "catalog.zip/aws.csv", 17)
    loose = tmp_path / "mine" / "runpod.csv"
    loose.parent.mkdir()
    shutil.copy(CATALOG / VERSION / "runpod.csv", loose)
    os.utime(loose, (1_790_000_000, 1_790_000_000))  # 2026-09-21
    (file,) = read_catalog(loose).files
    assert (file.version, file.seen, file.dated_by) == ("", "2026-09-21", "file date")
    (file,) = read_catalog(loose, seen="2026-11-01").files
    assert (file.seen, file.dated_by) == ("2026-11-01", "--seen")
    assert sorted(f.provider for f in read_catalog(CATALOG).files) == ["aws", "lambdalabs", "runpod"]
    older = tmp_path / "aws" / "20261102-4"  # gpuhunt's layout, two versions of one provider: the newest is used
    older.mkdir()
    shutil.copy(CATALOG / VERSION / "aws.csv", older / "aws.csv")
    catalog = read_catalog(tmp_path / "aws")
    assert [f.version for f in catalog.files] == ["20261121-9"] and [f.version for f in catalog.superseded] == [
        "20261102-4"]
    assert {o.catalog.version for o in catalog.offers} == {"20261121-9"}
    code, out, _ = run(capsys, "--catalog", loose, "--conf-dir", tmp_path / "none", "--tiers", "l4")
    assert code == 2  # the conf dir is checked first


@pytest.mark.parametrize("args,message", [
    (["--catalog", "/no/such/aws.csv"], "--catalog='/no/such/aws.csv': no such file or folder; give one provider's "
                                        "CSV"),
    (["--tiers", "l4,h100x"], "--tiers=l4,h100x: no tier ['h100x'] in the conf dir (its tiers: a100, a100_1g10gb, "
                              "a100_40gb"),
    (["--provider", "awz"], "--provider=awz: the catalog has no offers of ['awz'] (its providers: aws, lambdalabs, "
                            "runpod)"),
    (["--region", "us-east-9"], "--region=us-east-9: no offer is in ['us-east-9'] (the offers' regions: CA, CZ"),
    (["--seen", "20.11.2026"], "--seen='20.11.2026': not a day; give the day the catalog's prices were seen as "
                               "YYYY-MM-DD"),
    (["--prefix", "Gpuhunt"], "--prefix='Gpuhunt': not a price name"),
])
def test_bad_flags_are_refused_naming_the_flag_the_value_and_the_fix(
        conf: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    full = ["--catalog", str(CATALOG), "--conf-dir", str(conf / "gpu"), *args]
    code, out, err = run(capsys, *full)
    assert code == 2 and err.startswith("error: ") and message in err, err


def test_an_unreadable_catalog_file_is_refused_naming_it(
        tmp_path: Path, conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = tmp_path / "aws.csv"
    wrong.write_text("name,price\nx,1\n")
    with pytest.raises(PriceRefreshError, match=r"aws.csv is not one of gpuhunt's catalog CSVs: it lacks the columns "
                                                r"\['instance_name', 'location'"):
        read_catalog(wrong)
    wrong.write_bytes(b"\xff\xfe\x00binary")
    code, _, err = run(capsys, "--catalog", wrong, "--conf-dir", conf / "gpu")
    assert code == 2 and f"--catalog='{wrong}': cannot be read (UnicodeDecodeError" in err
    (tmp_path / "catalog.zip").write_text("not a zip")
    with pytest.raises(PriceRefreshError, match="cannot be read \\(BadZipFile"):
        read_catalog(tmp_path / "catalog.zip")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PriceRefreshError, match="the folder holds no catalog file"):
        read_catalog(empty)


def test_without_gpuhunt_it_says_how_to_install_it_or_pass_a_catalog(
        conf: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gpuhunt", None)  # import gpuhunt raises ImportError
    code, _, err = run(capsys, "--conf-dir", conf / "gpu")
    assert code == 2
    assert "gpuhunt is not installed (tierbench does not depend on it): pip install gpuhunt, or pass --catalog PATH" \
        in err


def test_gpuhunt_query_offers_are_read_with_their_catalog_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """gpuhunt's query() as gpuhunt 0.1.x answers it (CatalogItem fields, an enum vendor, the loaded catalogs'
    versions), stood in by a module: no download."""
    vendor = types.SimpleNamespace(value="nvidia")
    item = types.SimpleNamespace(provider="aws", instance_name="g6.xlarge", location="us-east-1", price=0.805, cpu=4,
                                 memory=16.0, gpu_count=1, gpu_name="L4", gpu_memory=24.0, gpu_vendor=vendor,
                                 spot=False, flags=[])
    asked = {}
    fake = types.ModuleType("gpuhunt")
    fake.query = lambda **kw: asked.update(kw) or [item]  # type: ignore[attr-defined]
    fake.default_catalog = lambda: types.SimpleNamespace(  # type: ignore[attr-defined]
        catalog={"aws": types.SimpleNamespace(version="20261125-3")})
    monkeypatch.setitem(sys.modules, "gpuhunt", fake)
    monkeypatch.setitem(sys.modules, "gpuhunt._internal", None)
    monkeypatch.setattr("importlib.metadata.version", lambda name: "0.1.34")
    catalog = query_gpuhunt(["AWS"])
    assert asked == {"provider": ["aws"]}
    (offer,) = catalog.offers
    assert (offer.gpu_vendor, offer.catalog.version, offer.catalog.seen, offer.catalog.offers) == (
        "nvidia", "20261125-3", "2026-11-25", 1)
    tiers = load_tiers(REPO_ROOT / "conf" / "gpu")
    (plan,) = refresh([tiers["l4"]], catalog.offers)
    assert "gpuhunt catalog aws 20261125-3 (gpuhunt 0.1.34 query): g6.xlarge in us-east-1" in plan.new_text


def test_pinned_is_a_price_key_and_price_pinned_a_tier_setting() -> None:
    from experiments.config.compose import load_config
    from experiments.config.errors import ConfigError
    from experiments.config.validation import validate

    cfg = load_config(["+gpu.prices.mine={usd_per_hour:0.2,pinned:true}", "gpu.price_pinned=true"])
    validate(cfg)
    assert cfg.gpu.price_pinned is True and cfg.gpu.prices["mine"]["pinned"] is True
    with pytest.raises(ConfigError, match="gpu.prices.mine.pinned='yes' is not allowed"):
        validate(load_config(["+gpu.prices.mine={usd_per_hour:0.2,pinned:yes}"]))


def test_the_reports_stale_price_note_names_the_refresh_command() -> None:
    import pandas as pd

    from experiments.config.prices import Price
    from experiments.report.data import SweepData, TierInfo
    from experiments.report.prices_section import stale_prices_note

    trials = pd.DataFrame([{"tier": "a100", "start_time": pd.Timestamp("2026-11-27 10:00", tz="UTC")}])
    tiers = {"a100": TierInfo("a100", prices=[Price("primary", 0.894, seen="2026-02-20")])}
    note = stale_prices_note(SweepData("s", "0", None, trials, tiers))
    assert "`python -m runners.prices` (docs/prices.md; it shows the change, `--write` applies it)" in note
