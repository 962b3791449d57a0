#!/usr/bin/env bash
# Sanitizers for CI (issue 16), sized to fit the CI budget on 2 cores:
#  1. ASan+UBSan (g++, -O0 -g1: an instrumented file compiles about 2.4x faster than at -O1)
#     of the state, executor and generation (incl. scheduler) C++ tests; the kernels (ops/)
#     and the generated protobuf code are built at -O0 without instrumentation
#     (-DONNX_LIGHT_SANITIZE_KERNELS=OFF): they are most of the objects. Also the fuzz
#     harnesses' replay of their seed corpora and fixed findings (tests/fuzz/replay_main.cc).
#  2. TSan of the tests that never enter TBB (tests/CMakeLists.txt, test_tsan): coroutine
#     tasks and SyncWait, TaskCompletion's cancel/publish race. Built from their own sources.
# Any sanitizer report fails the run. Incremental: later runs rebuild what changed.
#   bash tests/sanitize_ci.sh          both
#   BUILD_DIR=/tmp/s bash tests/sanitize_ci.sh   build folders <dir>-asan and <dir>-tsan
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir=${BUILD_DIR:-build-sanitize}
jobs=${JOBS:-$(nproc)}
start=$SECONDS

configure() {  # <folder> <cmake options...>
  local folder=$1
  shift
  [ -f "$folder/CMakeCache.txt" ] && return
  cmake -S . -B "$folder" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DONNX_LIGHT_PYTHON=OFF \
    -DONNX_LIGHT_PERF=OFF -DONNX_LIGHT_PCH=ON -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 "$@" > "$folder.configure.log" 2>&1 ||
    { cat "$folder.configure.log"; exit 1; }
  mv "$folder.configure.log" "$folder/configure.log"
}

build() {  # <folder> <targets...>
  local folder=$1
  shift
  cmake --build "$folder" -j "$jobs" --target "$@" |
    grep -vE '^\[[0-9]+/[0-9]+\] (Building|Linking|Generating|Running)' ||
    { echo "build failed"; exit 1; }
}

# -Wno-mismatched-new-delete: with ASan, GCC 12 misreads asio's awaitable frame
# operator delete as mismatched (tests/sanitize.sh); release builds do not.
echo "== ASan+UBSan: state, executor, generation tests ($dir-asan/, -j$jobs)"
configure "$dir-asan" -DONNX_LIGHT_SANITIZE=ON -DONNX_LIGHT_SANITIZE_KERNELS=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1 -Wno-mismatched-new-delete"
build "$dir-asan" test_state test_executor test_generation fuzz_replay_model fuzz_replay_text \
  fuzz_replay_encoded fuzz_replay_paged_cache fuzz_replay_state_feeds
echo "== built in $((SECONDS - start)) s"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$dir-asan" --output-on-failure -j "$jobs" -R '^(state|executor|generation|fuzz):'
echo "== ASan+UBSan done at $((SECONDS - start)) s"

echo "== TSan: tasks and TaskCompletion ($dir-tsan/)"
configure "$dir-tsan" -DONNX_LIGHT_TSAN=ON -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1"
build "$dir-tsan" test_tsan
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
ctest --test-dir "$dir-tsan" --output-on-failure -j "$jobs" -R '^tsan:'
echo "== sanitizers done in $((SECONDS - start)) s"
