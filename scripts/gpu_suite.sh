#!/usr/bin/env bash
# The whole GPU check in one call: install minialign from this checkout, run the CUDA tests, run the GPU
# benchmark, each stage under its own time budget (a stage that runs out is cut and reported; the next
# stages still run), and write what it found under one folder:
#
#   <machine>.json      the benchmark's rows as data (scripts/benchmarks/data.py: the machine, commit, date, load, GPU
#                       clocks at the start, middle and end; per row section, case, impl, baseline, ratio and the raw
#                       figures), each stage adding its rows as it measures them: "nvidia-h200.json" on an H200
#   BENCHMARKS-gpu.md   the stage table and the tables generated from that file (scripts/benchmarks/render.py)
#   summary.md          each stage: budget, seconds taken, ok / failed / cut; what was dropped; the tests' lines
#   junit-tests.xml     the CUDA tests' results (pytest --junitxml)
#   suite.log           everything every stage printed
#
#   bash scripts/gpu_suite.sh [--out DIR] [--total SECONDS] [--commit C]  # on a CUDA machine (default DIR: $OUT)
#   bash scripts/gpu_suite.sh --device cpu --dry-run --out DIR             # the same steps on a CPU at toy sizes
#   options: --budget STAGE=SECONDS; --stages LIST (comma-separated: these alone; the stages, in their order:
#            install tests scoring embeddings encoder-base drift, and tests-flex encoder-large, which run only when
#            named); --commit C (the checkout's commit, where the machine has no git); --write-docs (from a
#            checkout: copy the run's file into docs/benchmarks/ and generate BENCHMARKS.md from the data files);
#            $PYTHON (default: python on PATH)
#
# The method (scripts/bench.py --suite; scripts/benchmarks/timing.py, syncs.py): each row the median of interleaved
# repetitions (20; the scorer's 1,000-pair case 3: the original pipeline takes seconds a run) with its spread, the
# host's enqueue time, CUDA-event device time and synced wall time, syncs and kernels per call, compile time apart
# from the steady state and the recompiles after warm-up; the encoder's 64 x 512 eager / sdpa rows again at the end
# (drift), with GPU clocks logged beside. The CUDA tests are the cases marked `cuda` (conftest.DEVICES) in
# tests/models/test_models_on_devices.py, tests/products/test_products_on_devices.py and tests/nn/test_varlen.py
# (where it exists): every family, head and product against transformers / sentence-transformers / the original
# pipelines on the GPU, fp32 (TF32 off) and bf16 / fp16, every attention backend. No network is needed: minialign
# installs from this checkout with --no-index --no-deps; torch, transformers, sentence-transformers and tokenizers
# must already be there (wheels in .whl/ are installed first where that folder exists). A dry run
# (tests/test_gpu_suite.py) runs each stage's command at toy sizes on the CPU so the script cannot rot where no GPU is.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

device=cuda dry=0 out=${OUT:-} total=530 only="" commit="" write_docs=0
# The stages in their order, and those run only when --stages names them: what one call (at most 9 minutes, with
# the machine's start) drops to fit. Per-stage budgets (seconds) sum to 520 for the default stages, --total 530 with
# the run file's start and the clocks; the reports follow. Sized from the H200 calls of 2026-11-27 (install 20 s;
# CUDA tests 43 s; scoring at 12 examples 30 s and embeddings at 256 texts 29 s, now 1,000 pairs / texts at 20
# repetitions, the embeddings without the cross-encoder; encoder-base's bf16 rows 102 s, fp32 never reached:
# dropped, as are the flex tests, which compile every family's kernels afresh (2-16 s a case; 43 of 162 in 110 s),
# and roberta-large). An impl that compiles is timed in a group of its own after the others (timing.phases), so
# compiling cut short costs its rows only.
stages_in_order=(install tests scoring embeddings encoder-base drift tests-flex encoder-large)
on_request=" tests-flex encoder-large "
declare -A budget=([install]=30 [tests]=60 [scoring]=150 [embeddings]=95 [encoder-base]=145 [drift]=40
                   [tests-flex]=130 [encoder-large]=70)
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --out) out=$2; shift 2 ;;
    --total) total=$2; shift 2 ;;
    --commit) commit=$2; shift 2 ;;
    --write-docs) write_docs=1; shift ;;
    --budget) [[ ${2:-} == *=* ]] || { echo "gpu_suite.sh: --budget takes STAGE=SECONDS, got ${2:-nothing}" >&2; exit 2; }
              budget[${2%%=*}]=${2#*=}; shift 2 ;;  # --budget tests=300
    --stages) only=",$2,"; shift 2 ;;  # --stages install,tests: these alone
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "gpu_suite.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "gpu_suite.sh: no output folder: give --out DIR (or set OUT)" >&2; exit 2; }
for name in ${only//,/ }; do
  [ -n "${budget[$name]+set}" ] || { echo "gpu_suite.sh: unknown stage $name in --stages (stages: ${stages_in_order[*]})" >&2; exit 2; }
done
case "$device" in cpu|cuda|cuda:*) ;; *) echo "gpu_suite.sh: --device is cpu or cuda[:N], not $device" >&2; exit 2 ;; esac
(( write_docs && dry )) && { echo "gpu_suite.sh: --write-docs with --dry-run: a dry run's figures mean nothing" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_suite.XXXXXX")
: >"$work/stages"
py=${PYTHON:-$(command -v python || command -v python3)}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
log="$out/suite.log"
: >"$log"
start_all=$(date +%s)

say() { echo "$*" | tee -a "$log"; }

# stage NAME COMMAND...: runs COMMAND under min(its budget, what is left of --total), SIGINT at the end of it (pytest
# then still writes its report), SIGKILL 20 s later. Records NAME's seconds and status in $work/stages. A stage on
# request (on_request) runs only when --stages names it.
stage() {
  local name=$1; shift
  if [ -z "$only" ]; then [[ $on_request == *" $name "* ]] && return 0; else [[ $only == *",$name,"* ]] || return 0; fi
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
  local suffix=$1 marker=$2 select=() files=(tests/models/test_models_on_devices.py tests/products/test_products_on_devices.py)
  [ -f tests/nn/test_varlen.py ] && files+=(tests/nn/test_varlen.py)
  if (( dry )); then
    marker="not cuda and ${marker#cuda and }"
    select=(-k "cpu-bert-sdpa-fp32 or cpu-bert-packed-fp32 or cpu-bert-flex-fp32 or cpu-bin-fp32")
  fi
  "$py" -m pytest -p no:cacheprovider -q -rfEs -m "$marker" "${select[@]}" --junitxml="$out/junit-tests$suffix.xml" \
    "${files[@]}"
}

bench() {  # bench SECTION [ARGS...]: one section of the suite's method (scripts/bench.py --suite), rows into $data;
  # torch logs each recompile with the guard that failed (to suite.log): a compile that eats a stage says why
  local section=$1; shift
  TORCH_LOGS=${TORCH_LOGS:-recompiles} "$py" scripts/bench.py --suite "$section" --data "$data" --device "$device" "$@" \
    $( (( dry )) && echo --dry-run)
}

clocks() {  # clocks AT: the GPU's clocks into the run's file (absent on a CPU: the file says so)
  "$py" scripts/benchmarks/data.py clocks "$data" "$1" 2>&1 | tee -a "$log"
}

if [ -d .whl ]; then export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}; fi  # carried wheels, for every stage
export -f install tests bench
export py dry out device here
say "gpu_suite.sh: device $device, dry run $dry, total budget $total s, output $out, python $py"
stage install install
# The run's file, named for the machine (data.py start prints its path); every bench stage adds its rows to it.
data=$("$py" scripts/benchmarks/data.py start "$out" --device "$device" ${commit:+--commit "$commit"} \
       $( (( dry )) && echo --dry-run) 2>>"$log" | tail -n 1)
[ -n "$data" ] || { data="$out/run.json"; say "gpu_suite.sh: could not start the run's file (suite.log says why); $data"; }
say "gpu_suite.sh: rows go to $data"
export data
clocks start
stage tests tests "" "cuda and not slow"
stage scoring bench scoring
stage embeddings bench embeddings
clocks middle
stage encoder-base bench encoder --models roberta-base
stage drift bench drift --models roberta-base
stage tests-flex tests -flex "cuda and slow"
stage encoder-large bench encoder --models roberta-large
clocks end

# The reports: a stage table, what the call dropped, the tests' summary lines; the tables generated from the file.
{
  echo "| stage | budget (s) | took (s) | status |"
  echo "|---|---|---|---|"
  while IFS=$'\t' read -r name b took status; do echo "| $name | $b | $took | $status |"; done <"$work/stages"
} >"$work/table.md"
if [ -z "$only" ]; then
  dropped="Dropped to fit one call: the encoder's fp32 rows (the GPU's goals are bf16's; the CUDA tests check fp32 with TF32 off) and its padded flex row, the cross-encoder rows, the flex tests (tests-flex: every family's flex kernels compile afresh) and roberta-large (encoder-large); run the last two with --stages tests-flex,encoder-large."
else
  dropped="Stages run: ${only//,/ } (--stages)."
fi
{
  echo "# scripts/gpu_suite.sh: device $device$( (( dry )) && echo ', dry run (toy sizes, figures mean nothing)')"
  echo
  cat "$work/table.md"
  echo
  echo "$dropped"
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
  echo "Each bench stage is one \`python scripts/bench.py --suite SECTION\` process under its own time budget, adding"
  echo "its rows to $(basename "$data") as it measures them: a stage cut by its budget keeps the rows it measured."
  echo
  cat "$work/table.md"
  echo
  echo "$dropped"
  echo
  "$py" scripts/bench.py --render-files "$data" 2>>"$log" || echo "(no tables: $(basename "$data") could not be read; suite.log says why)"
} >"$out/BENCHMARKS-gpu.md"
if (( write_docs )); then
  cp "$data" docs/benchmarks/ && "$py" scripts/bench.py --render && say "gpu_suite.sh: $(basename "$data") copied to docs/benchmarks/, BENCHMARKS.md generated from the data files"
fi
say "gpu_suite.sh: done in $(( $(date +%s) - start_all )) s; reports in $out"
cat "$out/summary.md"
not_ok=$(grep -vc "	ok$" "$work/stages" 2>/dev/null || true)
[ -s "$work/stages" ] || not_ok=1  # no stage ran
rm -rf "$work"
exit $(( not_ok > 0 ))  # 0: every stage ok; 1: a stage failed, was cut or skipped (summary.md says which)
