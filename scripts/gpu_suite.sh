#!/usr/bin/env bash
# The whole GPU check in one call: install minialign from this checkout, run the CUDA tests, run the GPU
# benchmark, each stage under its own time budget (a stage that runs out is cut and reported; the next
# stages still run), and write what it found under one folder:
#
#   summary.md          each stage: budget, seconds taken, ok / failed / cut; the tests' pass/fail lines
#   BENCHMARKS-gpu.md   the benchmark sections (machine with device, driver and torch versions; encoder;
#                       AlignScore scoring; embeddings) and the stage table
#   junit-tests.xml, junit-tests-flex.xml   the CUDA tests' results (pytest --junitxml)
#   suite.log           everything every stage printed
#
#   bash scripts/gpu_suite.sh [--out DIR] [--total SECONDS]             # on a CUDA machine (default DIR: $OUT)
#   bash scripts/gpu_suite.sh --device cpu --dry-run --out DIR          # the same steps on a CPU at toy sizes
#   options: --budget STAGE=SECONDS (stages, in their order: install tests scoring embeddings encoder-base
#            tests-flex encoder-large), --stages LIST (comma-separated: these alone), $PYTHON (default: python on PATH)
#
# The CUDA tests are the cases marked `cuda` (conftest.DEVICES) in tests/models/test_models_on_devices.py
# and tests/products/test_products_on_devices.py: every family, head and product against transformers /
# sentence-transformers / the original pipelines on the GPU, fp32 (TF32 off) and bf16 / fp16, every attention
# run. No network is needed: minialign installs from this checkout with --no-index --no-deps; torch,
# transformers, sentence-transformers and tokenizers must already be there (wheels in .whl/ are installed
# first where that folder exists). A dry run (tests/test_gpu_suite.py) runs each stage's command at toy sizes
# on the CPU so the script cannot rot where no GPU is.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

device=cuda dry=0 out=${OUT:-} total=540 only=""
# Per-stage budgets (seconds); the sum stays inside one 10-minute call with room for the machine's start.
# Sized from two H200 runs (2026-11-27; the second: install 20 s, tests 43 s, scoring 30 s, embeddings 29 s; tests-flex
# cut at 110 s after 43 of its 162 cases, each family's flex kernels compiling afresh (2-16 s a case); encoder-base cut
# at 150 s once its bf16 rows were done, its fp32 rows compiling). Hence the order: the stages that finish first, the
# benchmark's bf16 rows alone (the GPU's goals are bf16's; fp32 with TF32 off is what the CUDA tests check), and the
# compiling stages last, each taking what it reaches (a cut stage keeps what it measured or passed).
declare -A budget=([install]=40 [tests]=60 [scoring]=45 [embeddings]=45 [encoder-base]=150 [tests-flex]=130
                   [encoder-large]=70)
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --out) out=$2; shift 2 ;;
    --total) total=$2; shift 2 ;;
    --budget) [[ ${2:-} == *=* ]] || { echo "gpu_suite.sh: --budget takes STAGE=SECONDS, got ${2:-nothing}" >&2; exit 2; }
              budget[${2%%=*}]=${2#*=}; shift 2 ;;  # --budget tests=300
    --stages) only=",$2,"; shift 2 ;;  # --stages install,tests: these alone
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gpu_suite.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "gpu_suite.sh: no output folder: give --out DIR (or set OUT)" >&2; exit 2; }
for name in ${only//,/ }; do
  [ -n "${budget[$name]+set}" ] || { echo "gpu_suite.sh: unknown stage $name in --stages (stages: ${!budget[*]})" >&2; exit 2; }
done
case "$device" in cpu|cuda|cuda:*) ;; *) echo "gpu_suite.sh: --device is cpu or cuda[:N], not $device" >&2; exit 2 ;; esac
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_suite.XXXXXX")
: >"$work/stages"
py=${PYTHON:-$(command -v python || command -v python3)}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
log="$out/suite.log"
: >"$log"
start_all=$(date +%s)
stages=()

say() { echo "$*" | tee -a "$log"; }

# stage NAME COMMAND...: runs COMMAND under min(its budget, what is left of --total), SIGINT at the end of it (pytest
# then still writes its report), SIGKILL 20 s later. Records NAME's seconds and status in $work/stages.
stage() {
  local name=$1; shift
  [ -z "$only" ] || [[ $only == *",$name,"* ]] || return 0
  local left=$(( total - ($(date +%s) - start_all) - 5 ))
  local b=${budget[$name]}
  (( left < b )) && b=$left
  if (( b <= 0 )); then
    say "== $name: skipped (no time left of --total $total s)"
    printf '%s\t%s\t%s\t%s\n' "$name" 0 0 "skipped (no time left)" >>"$work/stages"
    return
  fi
  say "== $name (budget $b s): $*"
  local t0=$(date +%s)
  timeout -s INT -k 20 "$b" bash -c '"$@"' "$name" "$@" >"$work/$name.out" 2>"$work/$name.err"
  local rc=$?
  cat "$work/$name.out" "$work/$name.err" >>"$log"
  tail -n 5 "$work/$name.err" >&2
  local took=$(( $(date +%s) - t0 ))
  local status=ok
  if (( rc == 124 || rc == 137 )); then status="cut after $b s"; elif (( rc != 0 )); then status="failed (exit $rc)"; fi
  say "== $name: $status in $took s"
  printf '%s\t%s\t%s\t%s\n' "$name" "$b" "$took" "$status" >>"$work/stages"
}

install() {
  if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then  # PYTHONPATH names /tmp/site already (top level)
    "$py" -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl || return 1
  fi
  # asked from another folder: run here, python would find the checkout's own minialign/ on its path (without
  # minialign.convert, which only an install maps), whether or not it is installed
  if (cd / && "$py" -c "import sys, minialign.convert, pathlib; sys.exit(pathlib.Path(minialign.__file__).resolve().parents[1] != pathlib.Path('$here'))") 2>/dev/null; then
    echo "minialign already imports from this checkout"
  else
    "$py" -m pip install -q --no-index --no-deps --no-build-isolation -e "$here" || return 1
  fi
  "$py" - "$device" <<'PY'
import sys

import torch

import minialign
for name in ("transformers", "sentence_transformers", "tokenizers", "safetensors"):
    module = __import__(name)
    print(f"{name} {module.__version__}")
print(f"torch {torch.__version__}, CUDA build {torch.version.cuda}, minialign {minialign.__version__} from {minialign.__file__}")
if sys.argv[1].startswith("cuda"):
    if not torch.cuda.is_available():
        sys.exit("no CUDA device visible to torch")
    print(f"device {torch.cuda.get_device_name()}, capability {torch.cuda.get_device_capability()}, "
          f"bf16 {torch.cuda.is_bf16_supported()}")
PY
  command -v nvidia-smi >/dev/null && nvidia-smi
  return 0
}

tests() {  # tests SUFFIX MARKER: the device test modules' cases under MARKER; a dry run takes a few CPU cases
  local suffix=$1 marker=$2 select=()
  if (( dry )); then
    marker="not cuda and ${marker#cuda and }"
    select=(-k "cpu-bert-sdpa-fp32 or cpu-bert-packed-fp32 or cpu-bert-flex-fp32 or cpu-bin-fp32")
  fi
  "$py" -m pytest -p no:cacheprovider -q -rfEs -m "$marker" "${select[@]}" --junitxml="$out/junit-tests$suffix.xml" \
    tests/models/test_models_on_devices.py tests/products/test_products_on_devices.py
}

bench() {  # bench SECTION [ARGS...]: one section of scripts/bench.py, its markdown on stdout
  local section=$1; shift
  "$py" scripts/bench.py --only "$section" --device "$device" "$@" $( (( dry )) && echo --dry-run)
}

encoder_dtypes=bf16  # on the CPU (a dry run) fp32, the dtype every CPU has
[ "$device" = cpu ] && encoder_dtypes=fp32
if [ -d .whl ]; then export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}; fi  # carried wheels, for every stage
export -f install tests bench
export py dry out device here
say "gpu_suite.sh: device $device, dry run $dry, total budget $total s, output $out, python $py"
stage install install
stage tests tests "" "cuda and not slow"
stage scoring bench scoring
stage embeddings bench embeddings
stage encoder-base bench encoder --models roberta-base --dtypes $encoder_dtypes
stage tests-flex tests -flex "cuda and slow"
stage encoder-large bench encoder --models roberta-large --dtypes $encoder_dtypes

# The reports: a stage table, the tests' summary lines, the benchmark sections (what each bench stage printed).
{
  echo "| stage | budget (s) | took (s) | status |"
  echo "|---|---|---|---|"
  while IFS=$'\t' read -r name b took status; do echo "| $name | $b | $took | $status |"; done <"$work/stages"
} >"$work/table.md"
{
  echo "# scripts/gpu_suite.sh: device $device$( (( dry )) && echo ', dry run (toy sizes, figures mean nothing)')"
  echo
  cat "$work/table.md"
  for suffix in "" -flex; do
    name=tests$suffix
    [ -f "$work/$name.out" ] || continue
    echo
    echo "## $name"
    echo
    echo '```'
    grep -E '^(FAILED|ERROR)|passed|failed|skipped|error|no tests ran|KeyboardInterrupt' "$work/$name.out" | tail -n 40
    echo '```'
  done
} >"$out/summary.md"
{
  echo "# GPU benchmark (scripts/gpu_suite.sh --device $device$( (( dry )) && echo ' --dry-run: toy sizes, figures mean nothing'))"
  echo
  echo "Each stage is one \`python scripts/bench.py --only SECTION --device $device\` process under its own time budget;"
  echo "a stage cut by its budget has no section below, only the rows it printed before the cut."
  echo
  cat "$work/table.md"
  for name in encoder-base encoder-large scoring embeddings; do
    if grep -q "^$name	.*	ok$" "$work/stages" && [ -s "$work/$name.out" ]; then
      echo
      if [ "$name" = encoder-large ]; then  # its machine section repeats encoder-base's
        sed -n '/^## Encoder forward/,$p' "$work/$name.out"
      else
        cat "$work/$name.out"
      fi
    elif [ -s "$work/$name.err" ] && grep -qE 'tok/s|pairs/s|items/s' "$work/$name.err"; then
      echo  # a cut or failed stage: what it measured before (bench.py prints each row to stderr as it goes)
      echo "### $name: $(grep "^$name	" "$work/stages" | cut -f4); the rows measured before"
      echo
      echo '```'
      grep -E '^machine:|ceiling|tok/s|pairs/s|items/s' "$work/$name.err"
      echo '```'
    fi
  done
} >"$out/BENCHMARKS-gpu.md"
say "gpu_suite.sh: done in $(( $(date +%s) - start_all )) s; reports in $out"
cat "$out/summary.md"
not_ok=$(grep -vc "	ok$" "$work/stages" 2>/dev/null || true)
[ -s "$work/stages" ] || not_ok=1  # no stage ran
rm -rf "$work"
exit $(( not_ok > 0 ))  # 0: every stage ok; 1: a stage failed, was cut or skipped (summary.md says which)
