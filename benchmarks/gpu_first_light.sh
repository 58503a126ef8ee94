#!/usr/bin/env bash
# First light on a GPU machine: every module imported, the doctor, a small GPU sweep and the `gpu`-marked tests (experiment=first_light:
# PyTorch FP32/FP16, Triton ORT-CUDA, TensorRT FP32/FP16 where its libraries load; tensors; b1/b8; c1/c8; HTTP and
# gRPC), one bundle under --out: doctor.txt, pytest.txt (+ junit XML), the sweep's log, report and raw records
# (runs/), SUMMARY.txt with each step's exit code and seconds. A failed step does not stop the next.
#
# usage: benchmarks/gpu_first_light.sh [--dry-run] [--out DIR] [--parts DIR | --wheelhouse DIR] [--venv DIR]
#                                      [--tier T] [-- sweep overrides ...]
#   --parts DIR       wheelhouse parts (python -m runners.wheelhouse --split-mib N): checked, joined, installed
#   --wheelhouse DIR  a wheelhouse folder (its wheels/): installed offline into --venv first
#   --venv DIR        the environment to install into / run from (default .venv-first-light); created with
#                     --system-site-packages so the image's own torch stays
#   --tier T          the GPU tier (default: the one the GPU's name matches in conf/gpu/)
#   --dry-run         everything but what needs a GPU: the sweep runs on tier `local` (its GPU variants are
#                     skipped by the product, with the reason), the gpu tests skip, saying why
# docs/offline-nodes.md and docs/gpu.md say how it is used on a lent GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
OUT=first-light
DRY_RUN=0
PARTS=""
WHEELHOUSE=""
VENV=""
TIER=""
SWEEP_OVERRIDES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --out) OUT=$2; shift ;;
    --parts) PARTS=$2; shift ;;
    --wheelhouse) WHEELHOUSE=$2; shift ;;
    --venv) VENV=$2; shift ;;
    --tier) TIER=$2; shift ;;
    --) shift; SWEEP_OVERRIDES=("$@"); break ;;
    *) echo "error: unknown option $1 (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
: > "$OUT/SUMMARY.txt"
FAILED=0

step() {  # step NAME LOGFILE COMMAND...: run it, log it, record exit code and seconds
  local name=$1 log=$2; shift 2
  local start=$SECONDS
  echo "== $name: $*" | tee -a "$OUT/SUMMARY.txt"
  "$@" > "$log" 2>&1
  local rc=$?
  printf '   exit %s after %ss (log: %s)\n' "$rc" "$((SECONDS - start))" "$(basename "$log")" | tee -a "$OUT/SUMMARY.txt"
  [ "$rc" = 0 ] || FAILED=1
  return "$rc"
}

install_wheelhouse() {  # join and check the parts, then pip install offline into $VENV
  local folder=$WHEELHOUSE
  if [ -n "$PARTS" ]; then
    (cd "$PARTS" && sha256sum -c --quiet SHA256SUMS) || { echo "parts fail their checksums"; return 1; }
    folder=$(mktemp -d /tmp/tierbench-wheelhouse.XXXXXX)
    cat "$PARTS"/wheelhouse.tar.* | tar -x -C "$folder" || return 1
  fi
  (cd "$folder" && sha256sum -c --quiet SHA256SUMS) || { echo "wheels fail their checksums"; return 1; }
  local extras
  extras=$(python3 -c "import json,sys; print(','.join(json.load(open(sys.argv[1]))['extras']))" \
             "$folder/wheelhouse.lock.json") || return 1
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv --system-site-packages "$VENV" || return 1
    # An image's python3 is often a venv's own (/opt/torch/.venv): a venv made from it sees the base interpreter's
    # packages, not that venv's torch. A .pth adds them, after the new venv's own (what we install comes first).
    python3 -c 'import site, sys; sys.prefix != sys.base_prefix and print("\n".join(site.getsitepackages()))' \
      > "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/image-site-packages.pth"
  fi
  # The wheelhouse's versions as constraints: where the image has another version of a package (pandas, onnx, ...),
  # the venv gets the wheelhouse's one, which fits tierbench's numpy<2; where it has the same, pip keeps it.
  sed 's/ --hash=.*//' "$folder/requirements.txt" > "$folder/constraints.txt"
  PIP_NO_INDEX=1 "$VENV/bin/python" -m pip install --no-index --find-links "$folder/wheels" \
    -c "$folder/constraints.txt" -e "$REPO[$extras]" || return 1
  # pip check sees the image's packages too (--system-site-packages): an image package that wants numpy 2 (jax, say)
  # is the image's business, reported; a broken requirement of tierbench or of a wheel it brought fails the install.
  local problems ours
  problems=$("$VENV/bin/python" -m pip check 2>&1) && return 0
  ours=$(printf '%s\n' "$problems" | grep -i -E "^($(sed 's/==.*//' "$folder/constraints.txt" | paste -sd'|')|tierbench) " )
  printf 'pip check, the image'"'"'s packages (not ours, reported only):\n%s\n' "$problems"
  [ -z "$ours" ] || { printf 'pip check, ours:\n%s\n' "$ours"; return 1; }
}

if [ -n "$PARTS$WHEELHOUSE" ]; then
  VENV=${VENV:-$REPO/.venv-first-light}
  step install "$OUT/install.txt" install_wheelhouse || { echo "install failed: see $OUT/install.txt"; exit 1; }
fi
if [ -n "$VENV" ]; then
  # shellcheck disable=SC1091
  . "$VENV/bin/activate"
fi
PYTHON=${PYTHON:-python}
"$PYTHON" -c "import sys, platform; print('python', platform.python_version(), sys.executable)" | tee -a "$OUT/SUMMARY.txt"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "none (nvidia-smi finds none)"; } \
  | sed 's/^/gpu: /' | tee -a "$OUT/SUMMARY.txt"

if [ "$DRY_RUN" = 1 ]; then
  TIER=local
elif [ -z "$TIER" ]; then
  TIER=$("$PYTHON" -c "
import subprocess
from runners.doctor import default_tier
names = subprocess.run(['nvidia-smi', '--query-gpu=name', '--format=csv,noheader'], capture_output=True,
                       text=True).stdout.split('\n')
print(default_tier(tuple(n.strip() for n in names if n.strip())))")
  if [ "$TIER" = local ]; then
    echo "error: no tier in conf/gpu/ matches this GPU (or there is none): pass --tier, or --dry-run" >&2
    exit 2
  fi
fi
echo "tier: $TIER$([ "$DRY_RUN" = 1 ] && echo ' (dry run: GPU-only variants skip, saying why)')" | tee -a "$OUT/SUMMARY.txt"

step imports "$OUT/imports.txt" "$PYTHON" -m offline.imports
step doctor "$OUT/doctor.txt" "$PYTHON" -m runners.doctor --tier "$TIER"

SWEEP_ID=first-light-$(date -u +%Y%m%d-%H%M%S)
step sweep "$OUT/sweep.txt" env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
  "$PYTHON" -m runners.sweep "gpu=$TIER" experiment=first_light "sweep_id=$SWEEP_ID" "results_dir=$OUT/runs" \
  quiet=true "${SWEEP_OVERRIDES[@]}"
step report "$OUT/report.txt" env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
  "$PYTHON" -m runners.report "$SWEEP_ID" --results-dir "$OUT/runs"

# The tests last: a lent GPU's minutes are few, and the sweep's figures are what the bundle is for.
step gpu-tests "$OUT/pytest.txt" "$PYTHON" -m pytest -m gpu -rs -p no:cacheprovider --junitxml "$OUT/pytest.xml"

echo "bundle: $OUT" | tee -a "$OUT/SUMMARY.txt"
exit "$FAILED"
