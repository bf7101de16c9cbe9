#!/usr/bin/env bash
# A fuzzing campaign over every target (or those named): each runs for SECONDS (default
# 600) on a working copy of its corpus under $FUZZ_WORK; fold what it found back into
# fuzz/corpus/<target>/ with `cargo fuzz cmin` (docs/fuzzing.md). Crashes stay in
# fuzz/targets/artifacts/.
# Prints one line per target: executions, coverage (libFuzzer's cov and ft), corpus size.
#   fuzz/campaign.sh [SECONDS] [TARGET...]      (JOBS=2 runs two targets at once;
#                                                FUZZ_NO_BUILD=1 runs the last build)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz/targets)
fi
work=${FUZZ_WORK:-/tmp/probeflow-fuzz}
mkdir -p "$work"
export PYO3_PYTHON=${PYO3_PYTHON:-$(command -v python3.11 || command -v python3)}
# py_json_cpython embeds that interpreter: its libpython.
LD_LIBRARY_PATH="$("$PYO3_PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
# Built here (unless FUZZ_NO_BUILD is set, for chained campaigns over one build) and run
# directly below, so that editing the sources while a campaign runs does not rebuild (and
# steal the fuzzers' CPU) between targets.
[ -n "${FUZZ_NO_BUILD:-}" ] || cargo fuzz build -s none --fuzz-dir fuzz/targets >/dev/null
bin=fuzz/targets/target/x86_64-unknown-linux-gnu/release
run_one() {
  local t=$1 corpus_name=$1
  [ "$t" = py_json_cpython ] && corpus_name=py_json
  local corpus="$work/corpus/$t"
  mkdir -p "$corpus" "fuzz/targets/artifacts/$t"
  cp -n fuzz/corpus/"$corpus_name"/* "$corpus"/ 2>/dev/null || true
  "$bin/$t" "$corpus" -artifact_prefix="fuzz/targets/artifacts/$t/" \
    -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 \
    -print_final_stats=1 -close_fd_mask=3 >"$work/$t.log" 2>&1 || echo "$t: CRASH (see $work/$t.log)"
  local execs cov ft
  execs=$(grep -a "stat::number_of_executed_units" "$work/$t.log" | awk '{print $2}' | tail -1)
  cov=$(grep -a -o "cov: [0-9]*" "$work/$t.log" | tail -1 | awk '{print $2}')
  ft=$(grep -a -o "ft: [0-9]*" "$work/$t.log" | tail -1 | awk '{print $2}')
  echo "$t: ${execs:-?} executions in ${seconds} s, cov ${cov:-?}, ft ${ft:-?}, corpus $(ls "$corpus" | wc -l)"
}
jobs=${JOBS:-1}
for t in "${targets[@]}"; do
  run_one "$t" &
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
done
wait
