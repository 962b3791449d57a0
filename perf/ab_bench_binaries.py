"""Interleaved A/B of Google Benchmark binaries (e.g. bench_matmul built before and after a
change): each round runs every binary in turn with the same filter; prints, per benchmark
and binary, the minimum and median of the wall ("Time") and CPU columns over all samples.

  python3 perf/ab_bench_binaries.py 'GemvLayers/1/30|GemvLayers(Spin)?/2/30' 4 old_bench new_bench
"""
import collections
import re
import statistics
import subprocess
import sys


def main():
    filt, rounds, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    res = collections.defaultdict(list)
    for _ in range(rounds):
        for b in bins:
            out = subprocess.run([b, f"--benchmark_filter={filt}", "--benchmark_min_time=0.2",
                                  "--benchmark_repetitions=3"],
                                 capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                f = line.split()
                if line.startswith("BM") and not re.search("_(mean|median|stddev|cv)", f[0]):
                    res[(f[0], b)].append(float(f[1]))
                    res[(f[0] + " cpu", b)].append(float(f[3]))
    for (name, b), v in sorted(res.items()):
        print(f"{name:45s} {b:30s} min {min(v):9.2f} median {statistics.median(v):9.2f} n {len(v)}")


if __name__ == "__main__":
    main()
