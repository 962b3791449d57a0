#!/usr/bin/env bash
# Builds the libFuzzer harnesses (build-fuzz/, clang, ASan+UBSan) and runs each one for a
# fixed time on a copy of its seed corpus, printing executions, rate and findings.
#   bash tests/fuzz/run_fuzzers.sh                  every target, 60 s each
#   SECONDS_PER_TARGET=600 bash tests/fuzz/run_fuzzers.sh model text
# Findings (crash-*, leak-*, timeout-*, oom-*) are written to build-fuzz/findings/<target>/;
# reproduce one with build-fuzz/tests/fuzz/fuzz_<target> <file>.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
dir=${BUILD_DIR:-build-fuzz}
per=${SECONDS_PER_TARGET:-60}
jobs=${JOBS:-$(nproc)}
targets=("$@")
# ccache as dev.sh sets it: a rebuild after a small change recompiles only that change.
export CCACHE_BASEDIR=$(pwd) CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=pch_defines,time_macros
((${#targets[@]})) || targets=(model text paged_cache encoded state_feeds)
if [ ! -f $dir/CMakeCache.txt ]; then
  echo "== configuring ($dir/)"
  CXX=clang++ cmake -S . -B $dir -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DONNX_LIGHT_FUZZ=ON -DONNX_LIGHT_WERROR=OFF \
    -DONNX_LIGHT_PYTHON=OFF -DONNX_LIGHT_PERF=OFF -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 > $dir.configure.log 2>&1 || { cat $dir.configure.log; exit 1; }
  mv $dir.configure.log $dir/configure.log
fi
start=$SECONDS
echo "== building (-j$jobs): ${targets[*]}"
cmake --build $dir -j "$jobs" --target $(printf 'fuzz_%s ' "${targets[@]}") |
  grep -vE '^\[[0-9]+/[0-9]+\] (Building|Linking|Generating|Running)' ||
  { echo "build failed"; exit 1; }
echo "== built in $((SECONDS - start)) s"
# allocator_may_return_null: an allocation ASan refuses throws std::bad_alloc (an expected
# error) instead of aborting; detect_leaks: LeakSanitizer after each input set.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
printf '%-12s %10s %8s %8s %s\n' target executions exec/s corpus findings
for t in "${targets[@]}"; do
  work=$dir/corpus/$t
  out=$dir/findings/$t
  mkdir -p "$work" "$out"
  cp -n tests/fuzz/corpus/$t/* "$work/" 2>/dev/null || true
  log=$dir/findings/$t.log
  $dir/tests/fuzz/fuzz_$t "$work" -max_total_time="$per" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$out/" > "$log" 2>&1
  rc=$?
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
  rate=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$')
  found=$(ls "$out" | wc -l)
  printf '%-12s %10s %8s %8s %s\n' "$t" "${execs:-?}" "${rate:-?}" "$(ls "$work" | wc -l)" \
    "$found$( ((rc)) && echo " (exit $rc, see $log)")"
  ((rc == 0 && found == 0)) || status=1
done
exit $status
