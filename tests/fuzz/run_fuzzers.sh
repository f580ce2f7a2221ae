#!/usr/bin/env bash
# Runs every libFuzzer harness built in BUILD (BUILD/tests/fuzz/fuzz_<harness>, from a configure with
# -DBARATO_BUILD_FUZZERS=ON) for SECONDS each, JOBS at a time, and prints executions per harness.
#   usage: tests/fuzz/run_fuzzers.sh BUILD [SECONDS=30] [JOBS=nproc] [HARNESS...]
# HARNESS names (e.g. gguf scheduler) restrict the run to those harnesses (default: every one built).
# FUZZ_RUNS=N stops each harness after N executions (or SECONDS, whichever comes first).
# Seeds: tests/fuzz/corpus/<harness>/, tests/fuzz/regressions/<harness>/ and the seeds
# fuzz_make_corpus cuts from $BARATO_DATA_DIR (when set). New inputs go to BUILD/fuzz/work/<harness>/,
# crash / leak / timeout inputs to BUILD/fuzz/artifacts/<harness>/.
# Exit status 1 when any harness reports a crash, a sanitizer error, a leak, a timeout (-timeout=10)
# or an out-of-memory (-rss_limit_mb=2048); its log is printed.
set -euo pipefail
build=$1
seconds=${2:-30}
jobs=${3:-$(nproc)}
shift $(($# < 3 ? $# : 3))
only=("$@")
runs_flag=()
if [ -n "${FUZZ_RUNS:-}" ]; then runs_flag=(-runs="$FUZZ_RUNS"); fi
src=$(cd "$(dirname "$0")" && pwd)
out=$build/fuzz
mkdir -p "$out"
"$build/tests/fuzz/fuzz_make_corpus" "$out/seeds" ${BARATO_DATA_DIR:+"$BARATO_DATA_DIR"} >/dev/null

harnesses=()
for bin in "$build"/tests/fuzz/fuzz_*; do
  name=${bin##*/fuzz_}
  [[ $name == make_corpus || $name == replay_* ]] && continue
  if [ ${#only[@]} -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then continue; fi
  harnesses+=("$name")
done
[ ${#harnesses[@]} -gt 0 ] || { echo "run_fuzzers: no fuzz_<harness> binaries${only[*]:+ named ${only[*]}} in $build/tests/fuzz" >&2; exit 1; }

# Longest input per harness: 1 KiB programs of operations or text; tokenizer files are whole
# vocabularies (tok512.bin is 6227 bytes).
max_len_of() {
  case $1 in
    tokenizer_load) echo 8192 ;;
    llama2c) echo 4096 ;;
    gguf) echo 32768 ;;
    *) echo 1024 ;;
  esac
}

run_one() {
  local name=$1
  mkdir -p "$out/work/$name" "$out/artifacts/$name"
  local dirs=("$out/work/$name") d
  for d in "$out/seeds/$name" "$src/corpus/$name" "$src/regressions/$name"; do
    if [ -d "$d" ]; then dirs+=("$d"); fi
  done
  local rc=0
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/tests/fuzz/fuzz_$name" -max_total_time="$seconds" "${runs_flag[@]}" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len_of "$name")" \
    -print_final_stats=1 -artifact_prefix="$out/artifacts/$name/" "${dirs[@]}" >"$out/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$out/$name.rc"
}

running=0
for name in "${harnesses[@]}"; do
  run_one "$name" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait

status=0
printf '%-18s %12s %10s %8s  %s\n' harness executions exec/s corpus result
for name in "${harnesses[@]}"; do
  log=$out/$name.log
  rc=$(cat "$out/$name.rc")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  corpus=$(find "$out/work/$name" -type f | wc -l)
  result=ok
  if [ "$rc" -ne 0 ] || grep -qE 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|runtime error:|invariant violated' "$log"; then
    result="FAILED (exit $rc)"
    status=1
  fi
  printf '%-18s %12s %10s %8s  %s\n' "$name" "${execs:-?}" "${rate:-?}" "$corpus" "$result"
done
if [ "$status" -ne 0 ]; then
  for name in "${harnesses[@]}"; do
    if [ "$(cat "$out/$name.rc")" -ne 0 ]; then
      echo "---- $name: last lines of $out/$name.log (inputs in $out/artifacts/$name/)"
      tail -n 60 "$out/$name.log"
    fi
  done
fi
exit "$status"
