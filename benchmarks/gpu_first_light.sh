#!/usr/bin/env bash
# First light on a GPU machine: every module imported, the doctor, the GPU's own ceiling (runners.ceiling, and
# benchmarks/ceiling_check.py against an independent timing), a small GPU sweep (experiment=first_light: PyTorch
# FP32/FP16 through Serve's proxy and direct, Triton ORT-CUDA alone and with its dynamic batcher, TensorRT FP32/FP16
# where its libraries load; tensors; b1/b8; c1/c8; HTTP and gRPC), the settings search that drives to the ceiling
# (experiment=cheapest_gpu), Triton's dynamic batcher (batcher: a change of batch shape in process, and the served
# batcher with and without its sessions per batch bucket: benchmarks/ort_batch_shapes.py, server_batching.py) and the
# `gpu`-marked tests, one bundle under --out: doctor.txt, ceiling.txt (+ JSON),
# the sweeps' logs, reports and raw records (runs/), pytest.txt (+ junit XML), SUMMARY.txt with each step's exit code
# and seconds. A failed step does not stop the next; each has a time limit (--step-limit S, default 600), and the
# whole command one too (--budget S): a lent GPU's time is counted from outside, and a command killed there from
# outside keeps only what its steps had finished, so the steps share the budget instead and a step that cannot get
# MIN_STEP_S seconds of it is skipped, saying so.
#
# usage: benchmarks/gpu_first_light.sh [--dry-run] [--out DIR] [--parts DIR | --wheelhouse DIR] [--venv DIR]
#                                      [--tier T] [--steps LIST] [--step-limit S] [--budget S]
#                                      [-- first_light overrides ...]
#   --parts DIR       wheelhouse parts (python -m runners.wheelhouse --split-mib N): checked, joined, installed
#   --wheelhouse DIR  a wheelhouse folder (its wheels/): installed offline into --venv first
#   --venv DIR        the environment to install into / run from (default: .venv-first-light with --parts or
#                     --wheelhouse, else the current one); created with
#                     --system-site-packages so the image's own torch stays
#   --tier T          the GPU tier (default: the one the GPU's name matches in conf/gpu/)
#   --steps LIST      the steps to run, comma-separated (default: all): imports, doctor, ceiling (runners.ceiling),
#                     check (benchmarks/ceiling_check.py), first-light (the sweep and its report), search
#                     (experiment=cheapest_gpu and its report), search-shm (the same search of Triton over
#                     grpc_shm: no tensor on the socket), search-haproxy (the search of Serve behind HAProxy,
#                     replicas per GPU searched), precisions (experiment=precisions and its report,
#                     per model in $PRECISION_MODELS, default resnet18), shared (the card beside the card shared
#                     by two servers, e.g. h100_sxm and h100_sxm_shared2), served (benchmarks/ceiling_vs_served.py),
#                     batcher, first-light-generative (experiment=first_light_generative: vLLM and Ray Serve
#                     LLM serving model=llama3_8b_random, and its report), tests;
#                     later commands can run more steps with the same --venv (the install is done once, with --parts)
#   --budget S        seconds for the whole command, install included (default: none); each step's limit is the
#                     smaller of --step-limit and what is left, and steps are skipped once under MIN_STEP_S (60) is left
#   --dry-run         everything but what needs a GPU: the sweeps run on tier `local` (their GPU variants are
#                     skipped by the product, with the reason), the gpu tests skip, saying why
# docs/offline-nodes.md and docs/gpu.md say how it is used on an air-gapped GPU node.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
OUT=first-light
DRY_RUN=0
PARTS=""
WHEELHOUSE=""
VENV=""
TIER=""
STEPS=imports,doctor,ceiling,check,first-light,search,search-shm,search-haproxy,precisions,shared,served,batcher,first-light-generative,tests
STEP_LIMIT=600
BUDGET=""
MIN_STEP_S=${MIN_STEP_S:-60}
KILL_AFTER_S=20
SWEEP_OVERRIDES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --out) OUT=$2; shift ;;
    --parts) PARTS=$2; shift ;;
    --wheelhouse) WHEELHOUSE=$2; shift ;;
    --venv) VENV=$2; shift ;;
    --tier) TIER=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --step-limit) STEP_LIMIT=$2; shift ;;
    --budget) BUDGET=$2; shift ;;
    --) shift; SWEEP_OVERRIDES=("$@"); break ;;
    *) echo "error: unknown option $1 (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
  shift
done
for NUMBER in "$STEP_LIMIT" ${BUDGET:+"$BUDGET"}; do
  [[ "$NUMBER" =~ ^[1-9][0-9]*$ ]] || { echo "error: --step-limit and --budget take whole seconds, got '$NUMBER'" >&2; exit 2; }
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
: > "$OUT/SUMMARY.txt"
FAILED=0

wanted() { [[ ",$STEPS," == *",$1,"* ]]; }  # wanted STEP: is it in --steps?

step_limit() {  # the seconds the next step may take: --step-limit, or less where the --budget has less left
  local limit=$STEP_LIMIT
  if [ -n "$BUDGET" ]; then
    local left=$((BUDGET - SECONDS - KILL_AFTER_S))  # a step that ignores its INT is killed KILL_AFTER_S later
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  echo "$limit"
}

step() {  # step NAME LOGFILE COMMAND...: run it (at most step_limit s), log it, record exit code and seconds
  local name=$1 log=$2; shift 2
  local start=$SECONDS limit
  limit=$(step_limit)
  if [ "$limit" -lt "$MIN_STEP_S" ]; then
    echo "== $name: skipped, ${limit}s of the ${BUDGET}s budget left (a step needs ${MIN_STEP_S}s)" | tee -a "$OUT/SUMMARY.txt"
    FAILED=1
    return 124
  fi
  echo "== $name: $*" | tee -a "$OUT/SUMMARY.txt"
  if declare -F "$1" > /dev/null; then "$@" > "$log" 2>&1  # a function of this script (the install): no limit
  else timeout --signal=INT --kill-after="$KILL_AFTER_S" "$limit" "$@" > "$log" 2>&1; fi
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
from runners.doctor import default_tier
from serving.node import nvml_gpus
gpus = nvml_gpus()
print(default_tier(gpus.names, gpus.memory_mib))")
  if [ "$TIER" = local ]; then
    echo "error: no tier in conf/gpu/ matches this GPU (or there is none): pass --tier, or --dry-run" >&2
    exit 2
  fi
fi
echo "tier: $TIER$([ "$DRY_RUN" = 1 ] && echo ' (dry run: GPU-only variants skip, saying why)')" | tee -a "$OUT/SUMMARY.txt"

wanted imports && step imports "$OUT/imports.txt" "$PYTHON" -m offline.imports
wanted doctor && step doctor "$OUT/doctor.txt" "$PYTHON" -m runners.doctor --tier "$TIER"

# The ceiling first, on an idle GPU: the sweeps find it in the node's cache (same model, runtimes and budget).
if wanted ceiling; then
  step ceiling "$OUT/ceiling.txt" "$PYTHON" -m runners.ceiling "gpu=$TIER" experiment=first_light \
    "experiment.backends=[pytorch,pytorch_fp16,pytorch_direct_batched,pytorch_fp16_direct_batched,triton_onnx]" \
    "experiment.batch_sizes=[1,8]" --json "$OUT/ceiling.json"
fi
if wanted check; then
  step ceiling-check "$OUT/ceiling_check.txt" "$PYTHON" benchmarks/ceiling_check.py --batches 1 8 32 \
    --name "ceiling_check_$TIER"
  cp "benchmarks/results/ceiling_check_$TIER.json" "$OUT/" 2>/dev/null
fi

if wanted search; then
  SEARCH_ID=search-$(date -u +%Y%m%d-%H%M%S)
  step search "$OUT/search.txt" env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
    "$PYTHON" -m runners.sweep "gpu=$TIER" experiment=cheapest_gpu "sweep_id=$SEARCH_ID" "results_dir=$OUT/runs" \
    quiet=true report=false
  step search-report "$OUT/search_report.txt" env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
    "$PYTHON" -m runners.report "$SEARCH_ID" --results-dir "$OUT/runs"
fi

if wanted search-shm; then  # the same search of Triton with no tensor on the socket: is the transport what stops it?
  SHM_ID=search-shm-$(date -u +%Y%m%d-%H%M%S)
  step search-shm "$OUT/search_shm.txt" env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
    "$PYTHON" -m runners.sweep "gpu=$TIER" experiment=cheapest_gpu "sweep_id=$SHM_ID" "results_dir=$OUT/runs" \
    quiet=true report=false 'experiment.backends=[triton_onnx_dynbatch]' 'experiment.protocols=[grpc_shm]'
  step search-shm-report "$OUT/search_shm_report.txt" env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
    "$PYTHON" -m runners.report "$SHM_ID" --results-dir "$OUT/runs"
fi

if wanted search-haproxy; then  # Serve behind HAProxy in place of its proxy, replicas per GPU searched too
  HAPROXY_ID=search-haproxy-$(date -u +%Y%m%d-%H%M%S)
  step search-haproxy "$OUT/search_haproxy.txt" env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
    "$PYTHON" -m runners.sweep "gpu=$TIER" experiment=cheapest_gpu "sweep_id=$HAPROXY_ID" "results_dir=$OUT/runs" \
    quiet=true report=false 'experiment.backends=[pytorch_haproxy_batched]'
  step search-haproxy-report "$OUT/search_haproxy_report.txt" env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
    "$PYTHON" -m runners.report "$HAPROXY_ID" --results-dir "$OUT/runs"
fi

if wanted precisions; then  # every precision on the GPU, held to the accuracy bound (docs/inputs.md)
  for MODEL in ${PRECISION_MODELS:-resnet18}; do
    PRECISIONS_ID=precisions-$MODEL-$(date -u +%Y%m%d-%H%M%S)
    step "precisions-$MODEL" "$OUT/precisions_$MODEL.txt" env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
      "$PYTHON" -m runners.sweep "gpu=$TIER" experiment=precisions "model=$MODEL" "sweep_id=$PRECISIONS_ID" \
      "results_dir=$OUT/runs" quiet=true report=false 'experiment.batch_sizes=[1,32]' 'experiment.concurrency=[8]' \
      experiment.window_s=2 experiment.warmup_s=1 experiment.stability.max_windows=4 experiment.accuracy.images=128
    step "precisions-$MODEL-report" "$OUT/precisions_${MODEL}_report.txt" \
      env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
      "$PYTHON" -m runners.report "$PRECISIONS_ID" --results-dir "$OUT/runs"
  done
fi

if wanted shared; then  # two servers on the card at once, each priced at half, beside the card alone
  SHARED=$("$PYTHON" -c "from experiments.cluster.tiers import shared_tiers_of; print(','.join(shared_tiers_of(['$TIER'])))")
  if [ -z "$SHARED" ]; then
    echo "shared: no tier in conf/gpu/ shares tier $TIER's card (docs/gpu-nodes.md#shared-cards)" | tee -a "$OUT/SUMMARY.txt"
  else
    SHARED_ID=shared-$(date -u +%Y%m%d-%H%M%S)
    step shared "$OUT/shared.txt" env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
      "$PYTHON" -m runners.sweep "gpu=$TIER,$SHARED" -m experiment=first_light "sweep_id=$SHARED_ID" \
      "results_dir=$OUT/runs" quiet=true report=false \
      'experiment.backends=[triton_onnx_dynbatch,pytorch_direct_batched]' 'experiment.protocols=[grpc]' \
      'experiment.batch_sizes=[8]' 'experiment.concurrency=[8]'
    step shared-report "$OUT/shared_report.txt" env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
      "$PYTHON" -m runners.report "$SHARED_ID" --results-dir "$OUT/runs"
  fi
fi

if wanted first-light; then
  SWEEP_ID=first-light-$(date -u +%Y%m%d-%H%M%S)
  step sweep "$OUT/sweep.txt" env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
    "$PYTHON" -m runners.sweep "gpu=$TIER" experiment=first_light "sweep_id=$SWEEP_ID" "results_dir=$OUT/runs" \
    quiet=true report=false "${SWEEP_OVERRIDES[@]}"
  step report "$OUT/report.txt" env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
    "$PYTHON" -m runners.report "$SWEEP_ID" --results-dir "$OUT/runs"
fi

if wanted served && [ -d "$OUT/runs" ]; then
  step ceiling-vs-served "$OUT/ceiling_vs_served.txt" "$PYTHON" benchmarks/ceiling_vs_served.py "$OUT/runs" \
    --name "ceiling_vs_served_$TIER"
  cp "benchmarks/results/ceiling_vs_served_$TIER.json" "$OUT/" 2>/dev/null
fi

# Triton's dynamic batcher on a GPU: what a change of batch shape costs ONNX Runtime in process (one session, and a
# session per size), then the served batcher with its sessions per batch bucket (the default on the CUDA EP) beside
# one session for every shape (batch_buckets=[]) and beside two instances without the batcher; each row names the
# server's busiest thread and the verdict.
if wanted batcher; then
  step ort-shapes "$OUT/ort_batch_shapes.txt" "$PYTHON" benchmarks/ort_batch_shapes.py --calls 10 \
    --name "ort_batch_shapes_$TIER"
  cp "benchmarks/results/ort_batch_shapes_$TIER.json" "$OUT/" 2>/dev/null
  step batcher "$OUT/server_batching.txt" "$PYTHON" -m benchmarks.server_batching --servers triton \
    --batch-size 1 8 --concurrency 4 8 --rounds 1 --window 1 --warmup 0.5 \
    --variant "dyn_no_buckets=triton_onnx_dynbatch:batch_buckets=[]" \
    --variant "two_instances=triton_onnx:instance_count=2" \
    --out "$OUT/server_batching_$TIER.json" "gpu=$TIER"
fi

# The launched generative servers: vLLM's own and Ray Serve LLM, an 8B Llama with random weights (nothing to
# download), per token. Without vLLM or without an NVIDIA GPU (a dry run) both are skipped, saying why.
if wanted first-light-generative; then
  GENERATIVE_ID=first-light-generative-$(date -u +%Y%m%d-%H%M%S)
  step first-light-generative "$OUT/generative.txt" env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
    "$PYTHON" -m runners.sweep "gpu=$TIER" experiment=first_light_generative model=llama3_8b_random \
    "sweep_id=$GENERATIVE_ID" "results_dir=$OUT/runs" quiet=true report=false
  step first-light-generative-report "$OUT/generative_report.txt" env MLFLOW_TRACKING_URI="sqlite:///$OUT/mlflow.db" \
    "$PYTHON" -m runners.report "$GENERATIVE_ID" --results-dir "$OUT/runs"
fi

# The tests last: the sweeps' figures are what the bundle is for.
if wanted tests; then
  step gpu-tests "$OUT/pytest.txt" "$PYTHON" -m pytest -m gpu -rs -p no:cacheprovider --junitxml "$OUT/pytest.xml"
fi

echo "bundle: $OUT" | tee -a "$OUT/SUMMARY.txt"
exit "$FAILED"
