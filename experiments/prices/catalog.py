"""gpuhunt's price catalog as offers: its published CSVs (one per provider) or its live query(), dated by catalog
version, and filtered by provider and region. It knows gpuhunt's format and nothing of the tiers."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.prices.errors import PriceRefreshError

# gpuhunt (github.com/dstackai/gpuhunt, PyPI `gpuhunt`; not a dependency of tierbench) publishes one catalog per cloud
# provider: a CSV of that provider's offers, one row per instance type, region and spot/on-demand, in
# `https://dstack-gpu-pricing.s3.eu-west-1.amazonaws.com/v3/<provider>/<version>/catalog.zip` (the version is
# `YYYYMMDD-<run>`, the day it was collected).
CATALOG_URL = "https://dstack-gpu-pricing.s3.eu-west-1.amazonaws.com/v3/<provider>/latest/catalog.zip"
# The columns of a catalog CSV (gpuhunt/_internal/storage.py CATALOG_V2_FIELDS); a file needs these, and gpuhunt's
# later ones (disk_size, gpu_vendor, flags, cpu_arch, provider_data) where it has them. The file's name is its provider.
CATALOG_COLUMNS = ("instance_name", "location", "price", "cpu", "memory", "gpu_count", "gpu_name", "gpu_memory", "spot",
                   "disk_size", "gpu_vendor", "flags", "cpu_arch", "provider_data")
REQUIRED_COLUMNS = CATALOG_COLUMNS[:9]
# The providers gpuhunt publishes catalogs of (gpuhunt/_internal/catalog.py OFFLINE_PROVIDERS): queried when no
# --provider is given. Its other providers are asked live (Vast.ai's marketplace, ...) and only when named.
CATALOG_PROVIDERS = ("aws", "azure", "verda", "gcp", "lambdalabs", "nebius", "oci", "runpod", "cloudrift")
# Offers of these gpuhunt flags are not prices of a node you rent by the hour.
EXCLUDED_FLAGS = {"runpod-cluster": "a RunPod cluster of 2-8 pods", "gcp-dws-calendar-mode": "a GCP reservation"}
VERSION_RE = re.compile(r"(?<!\d)(20\d{2})(\d{2})(\d{2})(?:-(\d+))?(?!\d)")


@dataclass(frozen=True)
class CatalogFile:
    """One provider's catalog as read: where from, its gpuhunt version and the day its prices were seen."""

    provider: str
    name: str  # the file as the source names it: aws.csv, catalog.zip/aws.csv, or `gpuhunt <version> query`
    version: str  # gpuhunt's catalog version, YYYYMMDD-<run>; "" where the file does not say
    seen: str  # YYYY-MM-DD
    dated_by: str  # version | file date | --seen | today
    offers: int = 0
    skipped: int = 0  # rows gpuhunt's own loader would skip too (malformed)

    def label(self) -> str:
        return f"{self.provider} {self.version}".strip() + f" ({self.name})"


@dataclass(frozen=True)
class Offer:
    """One row of the catalog: an instance type in a region, on demand or spot, at its price per hour."""

    provider: str
    instance_name: str
    location: str
    price: float
    cpu: int
    memory: float
    gpu_count: int
    gpu_name: str | None
    gpu_memory: float | None
    gpu_vendor: str | None
    spot: bool
    flags: tuple[str, ...]
    catalog: CatalogFile

    @property
    def per_gpu(self) -> float:
        """The price of one GPU of it: the instance's price / its GPUs (a CPU instance: its price)."""
        return self.price / self.gpu_count if self.gpu_count > 1 else self.price

    def describe(self) -> str:
        if self.gpu_count:
            what = f"{self.gpu_count}x {self.gpu_name} {self.gpu_memory:g} GB"
        else:
            what = f"{self.cpu} vCPU / {self.memory:g} GB, no GPU"
        kind = "spot" if self.spot else "on-demand"
        price = f"{kind} ${self.price:g}/h" + (" for the instance, one GPU's share" if self.gpu_count > 1 else "")
        return f"{self.instance_name} in {self.location}, {what}, {price}"

    def source(self) -> str:
        return f"gpuhunt catalog {self.catalog.label()}: {self.describe()}"


@dataclass
class Catalog:
    offers: list[Offer]
    files: list[CatalogFile]
    superseded: list[CatalogFile] = field(default_factory=list)  # a provider's older catalogs, given beside its newest

    @property
    def providers(self) -> list[str]:
        return sorted({f.provider for f in self.files})


# -- reading a catalog ----------------------------------------------------------------------------------------------

def read_catalog(path: Path, seen: str | None = None) -> Catalog:
    """gpuhunt's catalog from files: one provider's CSV (the file's name is its provider, e.g. aws.csv), a catalog.zip
    of them, or a folder holding either (searched below). `seen` (YYYY-MM-DD) dates every price; else the version
    in the path (gpuhunt's `.../<provider>/20261120-7/catalog.zip`), else a `version` file beside it or one folder up,
    else the file's modification day."""
    path = Path(path)
    if not path.exists():
        raise PriceRefreshError(f"--catalog={str(path)!r}: no such file or folder; give one provider's CSV from "
                                f"gpuhunt's catalog (e.g. aws.csv), its catalog.zip ({CATALOG_URL}), or a folder "
                                f"of them")
    files = sorted(p for p in path.rglob("*") if p.suffix.lower() in (".csv", ".zip")) if path.is_dir() else [path]
    if not files:
        raise PriceRefreshError(f"--catalog={str(path)!r}: the folder holds no catalog file (*.csv, *.zip); give one "
                                f"provider's CSV from gpuhunt's catalog, its catalog.zip, or a folder of them")
    catalog = Catalog([], [])
    for file in files:
        if file.suffix.lower() == ".zip":
            _read_zip(file, seen, catalog)
        elif file.suffix.lower() == ".csv":
            with _opened(file):
                text = file.read_text(encoding="utf-8")
            _read_csv(text, file.stem, file.name, _dating(file, seen), catalog)
        else:
            raise PriceRefreshError(f"--catalog={str(file)!r}: not a catalog file; give one provider's CSV from "
                                    f"gpuhunt's catalog (e.g. aws.csv), its catalog.zip, or a folder of them")
    return _newest(catalog)


def _newest(catalog: Catalog) -> Catalog:
    """One catalog per provider: where a folder holds several of one provider's, its newest (by day, then version)."""
    newest: dict[str, CatalogFile] = {}
    for f in catalog.files:
        kept = newest.get(f.provider)
        if kept is None or (f.seen, version_run(f.version)) > (kept.seen, version_run(kept.version)):
            newest[f.provider] = f
    keep = set(newest.values())
    return Catalog([o for o in catalog.offers if o.catalog in keep], [f for f in catalog.files if f in keep],
                   [f for f in catalog.files if f not in keep])


def version_run(version: str) -> tuple[str, int]:
    found = VERSION_RE.search(version or "")
    return (found.group(0)[:8], int(found.group(4) or 0)) if found else ("", 0)


class _opened:
    """File errors as PriceRefreshError naming the flag and the file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if isinstance(exc, UnicodeDecodeError | zipfile.BadZipFile | OSError | csv.Error):
            raise PriceRefreshError(f"--catalog={str(self.path)!r}: cannot be read ({type(exc).__name__}: {exc}); "
                                    f"give gpuhunt's catalog as published: a provider's CSV or its "
                                    f"catalog.zip") from None
        return False


def _read_zip(file: Path, seen: str | None, catalog: Catalog) -> None:
    with _opened(file), zipfile.ZipFile(file) as archive:
        members = [m for m in archive.namelist() if m.lower().endswith(".csv")]
        if not members:
            raise PriceRefreshError(f"--catalog={str(file)!r}: the zip holds no provider CSV (gpuhunt's catalog.zip "
                                    f"holds <provider>.csv)")
        for member in sorted(members):
            text = archive.read(member).decode("utf-8")
            _read_csv(text, Path(member).stem, f"{file.name}/{member}", _dating(file, seen), catalog)


def _dating(file: Path, seen: str | None) -> tuple[str, str, str]:
    """(version, seen, dated_by) of a catalog file."""
    version = catalog_version(file)
    if seen:
        return version, seen, "--seen"
    if version:
        return version, version_day(version), "version"
    day = dt.date.fromtimestamp(file.stat().st_mtime).isoformat()
    return version, day, "file date"


def catalog_version(file: Path) -> str:
    """gpuhunt's version of a catalog file (YYYYMMDD or YYYYMMDD-<run>): from its path, else from a `version` file
    beside it or one folder up (gpuhunt's bucket keeps `<provider>/version` beside `<provider>/<version>/`)."""
    for part in reversed(file.parts):
        found = VERSION_RE.search(part)
        if found and version_day(found.group(0)):
            return found.group(0)
    for folder in (file.parent, file.parent.parent):
        marker = folder / "version"
        if marker.is_file():
            text = marker.read_text(errors="replace").strip()
            if VERSION_RE.fullmatch(text) and version_day(text):
                return text
    return ""


def version_day(version: str) -> str:
    """The day a catalog version was collected, YYYY-MM-DD; "" if it names none."""
    found = VERSION_RE.search(version or "")
    if not found:
        return ""
    try:
        return dt.date(*(int(g) for g in found.groups()[:3])).isoformat()
    except ValueError:
        return ""


def _read_csv(text: str, provider: str, name: str, dating: tuple[str, str, str], catalog: Catalog) -> None:
    version, seen, dated_by = dating
    try:
        reader = csv.DictReader(io.StringIO(text))
        header = reader.fieldnames or []
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise PriceRefreshError(f"--catalog: {name} is not one of gpuhunt's catalog CSVs: it lacks the columns "
                                    f"{missing} (its header: {list(header)[:8]}); gpuhunt's have "
                                    f"{list(CATALOG_COLUMNS)}, the file named after its provider (aws.csv)")
        source = CatalogFile(provider.lower(), name, version, seen, dated_by)
        offers, skipped = [], 0
        for row in reader:
            try:
                offers.append(_offer(row, source))
            except (ValueError, TypeError):
                skipped += 1  # gpuhunt's loader skips a malformed row too
    except csv.Error as exc:
        raise PriceRefreshError(f"--catalog: {name} cannot be read as CSV ({exc}); give gpuhunt's catalog as "
                                f"published") from None
    source = CatalogFile(source.provider, name, version, seen, dated_by, len(offers), skipped)
    catalog.offers.extend(_with_catalog(o, source) for o in offers)
    catalog.files.append(source)


def _with_catalog(offer: Offer, source: CatalogFile) -> Offer:
    return Offer(**{**offer.__dict__, "catalog": source})


def _required(row: dict[str, str], key: str) -> str:
    value = row.get(key)
    if not value:
        raise ValueError(f"{key} is empty")
    return value


def _offer(row: dict[str, str], source: CatalogFile) -> Offer:
    """One catalog row, read as gpuhunt reads it (storage.item_from_row): a GPU without a vendor is NVIDIA's, a
    `tpu-` name Google's."""
    gpu_count = int(_required(row, "gpu_count"))
    gpu_name = row.get("gpu_name") or None
    vendor = (row.get("gpu_vendor") or "").lower() or None
    if gpu_name and gpu_name.startswith("tpu-"):
        gpu_name, vendor = gpu_name[4:], vendor or "google"
    elif vendor is None and gpu_count:
        vendor = "nvidia"
    spot = _required(row, "spot").lower()
    if spot not in ("true", "false"):
        raise ValueError(f"spot={spot!r}")
    return Offer(provider=source.provider, instance_name=_required(row, "instance_name"),
                 location=_required(row, "location"), price=float(_required(row, "price")),
                 cpu=int(_required(row, "cpu")), memory=float(_required(row, "memory")), gpu_count=gpu_count,
                 gpu_name=gpu_name, gpu_memory=float(row["gpu_memory"]) if row.get("gpu_memory") else None,
                 gpu_vendor=vendor, spot=spot == "true", flags=tuple((row.get("flags") or "").split()),
                 catalog=source)


def query_gpuhunt(providers: Sequence[str] = (), seen: str | None = None) -> Catalog:
    """The offers gpuhunt's `query()` gives now (it downloads the latest catalog of each provider): those of
    `providers`, else of every provider gpuhunt publishes a catalog of."""
    try:
        import gpuhunt
    except ImportError:
        raise PriceRefreshError("gpuhunt is not installed (tierbench does not depend on it): pip install gpuhunt, or "
                                "pass --catalog PATH with a catalog you downloaded (docs/prices.md)") from None
    try:
        from gpuhunt._internal.catalog import OFFLINE_PROVIDERS as published
    except ImportError:
        published = list(CATALOG_PROVIDERS)
    names = [p.lower() for p in providers] or list(published)
    try:
        items = gpuhunt.query(provider=names)
    except ValueError as exc:
        raise PriceRefreshError(f"--provider={','.join(providers)}: gpuhunt refuses it ({exc}); name providers as "
                                f"gpuhunt does, e.g. {','.join(CATALOG_PROVIDERS)}") from None
    except Exception as exc:  # no network, the bucket unreachable: gpuhunt's GPUHuntError, urllib's errors
        raise PriceRefreshError(f"gpuhunt could not load its catalog ({type(exc).__name__}: {exc}); download a "
                                f"provider's {CATALOG_URL} where you can and pass it with --catalog PATH") from None
    loaded = getattr(gpuhunt.default_catalog(), "catalog", {}) if hasattr(gpuhunt, "default_catalog") else {}
    try:
        from importlib.metadata import version as package_version

        release = package_version("gpuhunt")
    except Exception:
        release = "?"
    files: dict[str, CatalogFile] = {}
    offers = []
    for item in items:
        provider = str(item.provider).lower()
        if provider not in files:
            version = str(getattr(loaded.get(provider), "version", "") or "") if isinstance(loaded, dict) else ""
            day = seen or version_day(version) or dt.date.today().isoformat()
            dated_by = "--seen" if seen else ("version" if version_day(version) else "today")
            files[provider] = CatalogFile(provider, f"gpuhunt {release} query", version, day, dated_by)
        vendor = getattr(item, "gpu_vendor", None)
        offers.append(Offer(provider=provider, instance_name=str(item.instance_name), location=str(item.location),
                            price=float(item.price), cpu=int(item.cpu), memory=float(item.memory),
                            gpu_count=int(item.gpu_count or 0), gpu_name=item.gpu_name,
                            gpu_memory=float(item.gpu_memory) if item.gpu_memory else None,
                            gpu_vendor=str(getattr(vendor, "value", vendor)).lower() if vendor else None,
                            spot=bool(item.spot), flags=tuple(getattr(item, "flags", ()) or ()),
                            catalog=files[provider]))
    counted = {p: sum(1 for o in offers if o.provider == p) for p in files}
    final = {p: CatalogFile(f.provider, f.name, f.version, f.seen, f.dated_by, counted[p]) for p, f in files.items()}
    return Catalog([_with_catalog(o, final[o.provider]) for o in offers], list(final.values()))


# -- filtering ---------------------------------------------------------------------------------------------------------

def split_list(values: Iterable[str]) -> list[str]:
    return [v.strip() for value in values for v in str(value).split(",") if v.strip()]


def filter_offers(catalog: Catalog, providers: Sequence[str] = (), regions: Sequence[str] = ()) -> list[Offer]:
    """The offers of those providers and regions (each case aside; none given: all), without the flagged kinds
    that are no hourly price (EXCLUDED_FLAGS) or a price of 0. A provider or region no offer has is refused: a
    typo would otherwise leave every tier without offers."""
    wanted = {p.lower() for p in providers}
    unknown = sorted(wanted - set(catalog.providers))
    if unknown:
        raise PriceRefreshError(f"--provider={','.join(providers)}: the catalog has no offers of {unknown} (its "
                                f"providers: {', '.join(catalog.providers) or 'none'}); name them as gpuhunt does "
                                f"(aws, gcp, azure, lambdalabs, runpod, ...) or give their catalog with --catalog")
    offers = [o for o in catalog.offers if not wanted or o.provider in wanted]
    places = {r.lower() for r in regions}
    if places:
        known = sorted({o.location for o in offers})
        missing = sorted(places - {k.lower() for k in known})
        if missing:
            shown = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
            raise PriceRefreshError(f"--region={','.join(regions)}: no offer is in {missing} (the offers' regions: "
                                    f"{shown or 'none'}); name regions as the provider does, e.g. us-east-1")
        offers = [o for o in offers if o.location.lower() in places]
    return [o for o in offers if o.price > 0 and not set(o.flags) & set(EXCLUDED_FLAGS)]
