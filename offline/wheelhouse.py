"""Build a wheelhouse: resolve for the node, download what it lacks (pip, hashes checked), write the lock and
checksums, and optionally cut it into parts of a size a transport takes.

Layout of `<out>/`: `wheels/` (what `pip install --no-index --find-links` reads), `wheelhouse.lock.json` (target,
extras, what the node keeps, each wheel's name, version, file, sha256 and size), `requirements.txt` (the same
pins with hashes), `SHA256SUMS` (`sha256sum -c` on the node), and with `--split-mib` `parts/wheelhouse.tar.NNN`
(`cat parts/wheelhouse.tar.* | tar -x`). Downloads already in `wheels/` with the right hash are reused."""

from __future__ import annotations

import hashlib
import io
import json
import platform
import shutil
import tarfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from offline.project import Project
from offline.resolve import Keep, Package, ResolutionError, leave_out_kept, pip, resolve
from offline.target import Target, check_extras

LOCK_FILE = "wheelhouse.lock.json"
MIB = 1024 * 1024


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    file: str
    sha256: str
    bytes: int


@dataclass
class Lock:
    target: dict
    extras: list[str]
    kept: list[str]                     # what the node keeps: the rules given and the packages they left out
    wheels: list[Wheel]
    built_from_sdist: list[str]         # wheels built here; compiled ones need the node's glibc >= built_on's
    built_on: str
    pip_version: str
    created_utc: str
    install: str
    parts: list[dict] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(wheel.bytes for wheel in self.wheels)

    def write(self, folder: Path) -> None:
        (folder / LOCK_FILE).write_text(json.dumps({**asdict(self), "total_bytes": self.total_bytes}, indent=1) + "\n")
        (folder / "SHA256SUMS").write_text("".join(f"{w.sha256}  wheels/{w.file}\n" for w in self.wheels))
        (folder / "requirements.txt").write_text("".join(f"{w.name}=={w.version} --hash=sha256:{w.sha256}\n"
                                                         for w in self.wheels))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(MIB):
            digest.update(chunk)
    return digest.hexdigest()


def build(project: Project, target: Target, extras: list[str], keep: list[Keep],
          out: Path, pip_args: list[str], split_mib: int | None = None,
          say: Callable[[str], None] = print) -> Lock:
    project.check_python(target)
    check_extras(extras, target.cuda, set(project.extras))
    keeps_torch = any(rule.matches("torch") for rule in keep)
    roots = project.requirements(extras) + ([] if keeps_torch else list(map(Requirement, target.torch_requirements())))
    out.mkdir(parents=True, exist_ok=True)
    work = out / ".work"
    work.mkdir(exist_ok=True)
    constraints = [rule.constraint for rule in keep if rule.constraint]
    constraint_args: list[str] = []
    if constraints:
        (work / "kept.txt").write_text("\n".join(constraints) + "\n")
        constraint_args = ["--constraint", str(work / "kept.txt")]
    say(f"resolving {len(roots)} requirements for {target.slug} (Python {target.python}, {target.platform}, "
        f"extras {','.join(extras) or 'none'}) with pip ...")
    try:
        resolution = resolve([str(root) for root in roots], target, pip_args + constraint_args, work)
    except ResolutionError as exc:
        if constraints:   # e.g. a freeze's numpy 2.x against tierbench's numpy<2
            raise ResolutionError(f"{exc}\nThe kept versions pin the resolution ({', '.join(constraints)}): where one "
                                  "conflicts with what tierbench needs, leave it out of --keep-installed and the "
                                  "wheelhouse brings the version needed.") from exc
        raise
    held, kept = leave_out_kept(resolution.packages, roots, keep, target)
    compiled = [path.name for path in resolution.built if not path.name.endswith("-none-any.whl")]
    if compiled:
        say(f"  compiled here for the node (glibc {platform.libc_ver()[1]} here; the node's must be as new): "
            f"{', '.join(compiled)}")
    say(f"  {len(resolution.packages)} packages resolved; {len(kept)} left to the node "
        f"({', '.join(package.pin for package in kept) or 'none'})")
    wheels = download(held, target, out / "wheels", pip_args, say)
    lock = Lock(target={"python": target.python, "platform": target.platform, "cuda": target.cuda,
                        "slug": target.slug},
                extras=extras, kept=[*(f"{r.pattern}{'==' + r.version if r.version else ''}" for r in keep),
                                     *(f"left out: {package.pin}" for package in kept)],
                wheels=wheels, built_from_sdist=[path.name for path in resolution.built],
                built_on=f"{platform.machine()}, glibc {platform.libc_ver()[1]}",
                pip_version=pip("--version").stdout.split()[1], created_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                         time.gmtime()),
                install=install_command(extras))
    lock.write(out)
    if split_mib:
        lock.parts = split(out, split_mib)
        lock.write(out)
    shutil.rmtree(work, ignore_errors=True)
    return lock


def install_command(extras: list[str]) -> str:
    """The node's install, in the node's paths (the wheelhouse and the checkout are wherever they were copied)."""
    extra = f"[{','.join(extras)}]" if extras else ""
    return f"pip install --no-index --find-links <wheelhouse>/wheels -e '<tierbench checkout>{extra}'"


def download(packages: list[Package], target: Target, into: Path, pip_args: list[str],
             say: Callable[[str], None]) -> list[Wheel]:
    """Each package's wheel into `into` (hash-checked by pip; files already there with the right hash reused),
    and nothing else left there."""
    into.mkdir(parents=True, exist_ok=True)
    present = {_key(path): path for path in into.glob("*.whl")}
    wanted = {(package.name, package.version): package for package in packages}
    for key, path in present.items():
        if key not in wanted or (wanted[key].sha256 and sha256_of(path) != wanted[key].sha256):
            path.unlink()
    present = {_key(path): path for path in into.glob("*.whl")}
    fetch = [package for key, package in wanted.items() if key not in present]
    local = [package for package in fetch if package.url.startswith("file:")]
    remote = [package for package in fetch if not package.url.startswith("file:")]
    for package in local:   # built here from an sdist, or from a local index
        shutil.copy2(unquote(urlparse(package.url).path), into)
    if remote:
        say(f"downloading {len(remote)} wheels ({len(present)} already here) ...")
        pins = into.parent / ".work" / "download.txt"
        pins.parent.mkdir(exist_ok=True)
        pins.write_text("".join(f"{p.pin} --hash=sha256:{p.sha256}\n" if p.sha256 else f"{p.pin}\n" for p in remote))
        hashes = ["--require-hashes"] if all(p.sha256 for p in remote) else []
        done = pip("download", "--no-deps", "--progress-bar", "off", "--dest", str(into), *target.pip_options(),
                   *hashes, *pip_args, "--requirement", str(pins))
        if done.returncode != 0:
            raise ResolutionError(f"pip download failed:\n{done.stderr.strip()[-3000:]}")
    wheels = []
    for path in sorted(into.glob("*.whl")):
        name, version = _key(path)
        expected = wanted[(name, version)].sha256
        digest = sha256_of(path)
        if expected and digest != expected:
            raise ResolutionError(f"{path.name}: sha256 {digest} is not the resolved {expected}")
        wheels.append(Wheel(name, version, path.name, digest, path.stat().st_size))
    missing = set(wanted) - {(wheel.name, wheel.version) for wheel in wheels}
    if missing:
        raise ResolutionError(f"not downloaded: {', '.join(f'{n}=={v}' for n, v in sorted(missing))}")
    return wheels


def _key(path: Path) -> tuple[str, str]:
    name, version, _, _ = parse_wheel_filename(path.name)
    return canonicalize_name(name), str(version)


class _Parts(io.RawIOBase):
    """A write-only stream cut into files of at most `size` bytes: parts/wheelhouse.tar.000, .001, ..."""

    def __init__(self, folder: Path, size: int) -> None:
        self.folder, self.size, self.paths = folder, size, []
        self._file = None
        self._left = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        view = memoryview(data)
        while view:
            if not self._left:
                self._next()
            chunk = view[: self._left]
            self._file.write(chunk)
            self._left -= len(chunk)
            view = view[len(chunk):]
        return len(data)

    def _next(self) -> None:
        if self._file:
            self._file.close()
        path = self.folder / f"wheelhouse.tar.{len(self.paths):03d}"
        self.paths.append(path)
        self._file, self._left = path.open("wb"), self.size

    def close(self) -> None:
        if self._file:
            self._file.close()
        super().close()


def split(out: Path, split_mib: int) -> list[dict]:
    """Tar the wheelhouse (wheels, lock, checksums) into parts of at most `split_mib` MiB each, with their own
    SHA256SUMS; the node joins them with `cat parts/wheelhouse.tar.* | tar -x`."""
    folder = out / "parts"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    stream = _Parts(folder, split_mib * MIB)
    with tarfile.open(fileobj=stream, mode="w|") as archive:
        for name in (LOCK_FILE, "SHA256SUMS", "requirements.txt"):
            archive.add(out / name, arcname=name)
        for path in sorted((out / "wheels").glob("*.whl")):
            archive.add(path, arcname=f"wheels/{path.name}")
    stream.close()
    parts = [{"file": path.name, "bytes": path.stat().st_size, "sha256": sha256_of(path)} for path in stream.paths]
    (folder / "SHA256SUMS").write_text("".join(f"{part['sha256']}  {part['file']}\n" for part in parts))
    return parts
