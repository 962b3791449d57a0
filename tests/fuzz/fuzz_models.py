"""Mutation fuzzer for onnx-light from Python (issue 16; not part of CI).

Targets:
  bytes     mutated bytes of the repository's test models: load, print, plan, one run with
            feeds synthesized from the declared inputs;
  semantic  well-formed models with one semantic mutation (dims, attribute values and tags,
            extra node inputs/outputs, op types, initializer payloads): plan and run;
  feeds     valid models fed mutated feeds (shapes, dtypes, strides, byte order, nesting,
            self-reference) through sessions and persistent states.

Each batch of cases runs in a child process with a 4 GB address-space limit; the parent
counts a child killed by a signal as a crash, a case running past --timeout as a hang, and
one that died of memory exhaustion as an oom, attributes it to the case the child was on,
saves that case's seed, and resumes after it. Python exceptions (ValueError, TypeError, ...)
are the expected outcome for bad input and are only counted.

    python tests/fuzz/fuzz_models.py --target bytes --seconds 180
    python tests/fuzz/fuzz_models.py --replay bytes 1234 17   # one saved case, in-process
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INTERESTING = [0, 1, 2, 3, -1, -2, 7, 255, 2**15, 2**31 - 1, 2**31, 2**32, 2**40, 2**61,
               2**62, 2**63 - 1, -2**63]

# ---- seed models ------------------------------------------------------------------------

TEXT_MODELS = [
    'g (float[2] x, float[2] y) => (float[2] z) { z = Add(x, y) }',
    'g (float[2,3] x) => (float[3,2] y) { y = Transpose<perm=[1,0]>(x) }',
    'g (int64[2] s) => (float[N,M] y) { y = ConstantOfShape(s) }',
    'g (float[2,2] x, int64[2] r) => (float[A,B] y) { y = Tile(x, r) }',
    'g (float[1,2] x, int64[2] s) => (float[A,B] y) { y = Expand(x, s) }',
    'g (float[4] x, int64[1] s) => (float[A] y) { y = Reshape(x, s) }',
    'g (float[3] x, int64[1] i) => (float[1] y) { y = Gather<axis=0>(x, i) }',
    'g (int64[3] i, float d, float[2] v) => (float[3,D] y) { y = OneHot(i, d, v) }',
    'g (float a, float b, float c) => (float[N] y) { y = Range(a, b, c) }',
    'g (float[2,3] x, float[2,3] w) => (float[2,6] y) { y = Concat<axis=1>(x, w) }',
    'g (float[1,2] x, int64[4] p) => (float[A,B] y) { y = Pad(x, p) }',
    'g (float[2,4] x) => (float[2,4] y) { y = Softmax<axis=1>(x) }',
    'g (float[2,3] x, float[3,2] w) => (float[2,2] y) { y = MatMul(x, w) }',
    'g (float[2,3] x, int64[1] st, int64[1] en) => (float[A,B] y) { y = Slice(x, st, en) }',
    'g (float[4] x) => (float[A] y, float[B] z) { y, z = Split<num_outputs=2>(x) }',
    'g (float[2,3] x) => (uint8[2,3] y, float s, uint8 z) { y, s, z = DynamicQuantizeLinear(x) }',
    'g (uint8[2,3] a, int8[3,2] b, uint8 za, int8[2] zb) => (int32[2,2] y) '
    '{ y = MatMulInteger(a, b, za, zb) }',
    'g (float16[2,3] x, float16[3,2] w) => (float16[2,2] y) { y = MatMul(x, w) }',
]
STATE_MODEL = ('g (float[2] x, float[2] past) => (float[2] y, float[2] present) '
               '{ present = Add(x, past) y = Identity(present) }')


def seed_models() -> list[bytes]:
    from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder
    from onnx_light.onnx_lib import parser

    header = '<ir_version: 10, opset_import: ["" : 18]>'
    out = [parser.parse_model(header + t).SerializeToString() for t in TEXT_MODELS]
    # The libFuzzer corpus's extra models (control flow, contrib ops, the Hub files' products).
    sys.path.insert(0, str(Path(__file__).parent))
    import make_corpus

    out += [parser.parse_model(t).SerializeToString() for t in make_corpus.EXTRA_TEXT_MODELS]
    out.append(build_tiny_decoder(config=TinyDecoderConfig()).SerializeToString())
    for p in sorted((REPO / "tests/data/text_parser").glob("*.pb")) + sorted(
            (REPO / "tests/data/text_parser").glob("*.onnx")):
        out.append(p.read_bytes())
    return out


# ---- mutations --------------------------------------------------------------------------

def mutate_bytes(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        if not b:
            b = bytearray(rng.randbytes(8))
        i = rng.randrange(len(b))
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        elif op == 2:  # a large varint where a small one was
            b[i:i + 1] = bytes([0xFF] * rng.randint(1, 9) + [0x01])
        elif op == 3:
            del b[i:i + rng.randint(1, 16)]
        elif op == 4:
            b[i:i] = rng.randbytes(rng.randint(1, 16))
        else:  # splice a piece of another model
            other = rng.choice(seeds)
            j = rng.randrange(len(other))
            b[i:i] = other[j:j + rng.randint(1, 64)]
    return bytes(b)


def mutate_semantic(rng: random.Random, data: bytes) -> bytes:
    import onnx

    m = onnx.ModelProto.FromString(data)
    g = m.graph
    choice = rng.randrange(7)
    if choice == 0 and len(g.initializer):
        t = rng.choice(g.initializer)
        if len(t.dims):
            t.dims[rng.randrange(len(t.dims))] = rng.choice(INTERESTING)
        else:
            t.dims.append(rng.choice(INTERESTING))
    elif choice == 1 and len(g.node):
        n = rng.choice(g.node)
        ints = [a for a in n.attribute if a.type in (onnx.AttributeProto.INT,
                                                     onnx.AttributeProto.INTS)]
        if ints:
            a = rng.choice(ints)
            if a.type == onnx.AttributeProto.INT:
                a.i = rng.choice(INTERESTING)
            elif len(a.ints):
                a.ints[rng.randrange(len(a.ints))] = rng.choice(INTERESTING)
    elif choice == 2 and len(g.node):
        n = rng.choice(g.node)
        names = [i.name for i in g.input] + [o for k in g.node for o in k.output]
        if rng.random() < 0.5:
            n.input.append(rng.choice(names) if names else "x")
        else:
            n.output.append(f"extra_{rng.randrange(100)}")
    elif choice == 3 and len(g.node):
        n = rng.choice(g.node)
        n.op_type = rng.choice(["Add", "Reshape", "Gather", "Tile", "Expand", "Concat", "Range",
                                "ConstantOfShape", "OneHot", "Pad", "Slice", "Split", "Where",
                                "Transpose", "Attention", "Loop", "If", "Constant"])
    elif choice == 4 and len(g.node):
        n = rng.choice(g.node)
        if len(n.attribute):
            rng.choice(n.attribute).type = rng.randrange(1, 15)
    elif choice == 5 and len(g.initializer):
        t = rng.choice(g.initializer)
        t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data) + 1)]
    else:
        n = g.node.add()
        n.op_type = "Constant"
        n.output.append(f"c{rng.randrange(100)}")
        a = n.attribute.add()
        a.name = rng.choice(["value_floats", "value_ints", "value", "value_float"])
        a.type = rng.randrange(1, 15)
        a.floats.extend([1.0, 2.0])
    return m.SerializeToString()


def feed_value(rng: random.Random, dtype, shape):
    import numpy as np

    kind = rng.randrange(10)
    if kind == 0:
        loop: list = []
        loop.append(loop)
        return loop
    if kind == 1:
        v = np.zeros(2, np.float32)
        for _ in range(rng.choice([10, 70, 1000])):
            v = [v] if rng.random() < 0.5 else {"f": v}
        return v
    if kind == 2:
        return np.zeros(shape, dtype).astype(np.dtype(dtype).newbyteorder())
    if kind == 3 and len(shape) >= 1:
        return np.zeros([s * 2 for s in shape], dtype)[tuple(slice(None, None, 2) for _ in shape)]
    if kind == 4:
        return rng.choice([None, 3, "x", (1, 2), {1, 2}, b"abc", object()])
    if kind == 5:
        return np.zeros(shape, rng.choice([np.float32, np.int64, np.float16, np.bool_,
                                           np.complex64, np.uint8]))
    if kind == 6:
        return np.full(shape, rng.choice(INTERESTING[:14]), np.int64).astype(dtype)
    if kind == 7:
        import torch
        return torch.zeros([max(s, 0) for s in shape] or [1]).T
    return np.zeros([rng.choice([0, 1, 2, 3, 65536]) for _ in shape], dtype)


# ---- running one case -------------------------------------------------------------------

def synthesize_feeds(session_model, rng: random.Random, mutate: bool):
    import numpy as np
    import onnx

    feeds = {}
    for inp in session_model.graph.input:
        tt = inp.type.tensor_type
        try:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        except Exception:  # noqa: BLE001 - an unknown element type after mutation
            dtype = np.float32
        shape = [d.dim_value if d.HasField("dim_value") and 0 <= d.dim_value <= 8 else 2
                 for d in tt.shape.dim]
        if mutate and rng.random() < 0.5:
            feeds[inp.name] = feed_value(rng, dtype, shape)
            continue
        if np.dtype(dtype).kind in "iu":
            feeds[inp.name] = np.array(rng.choice([0, 1, 2, 3]), dtype) * np.ones(shape, dtype)
        else:
            feeds[inp.name] = np.ones(shape, dtype)
    return feeds


def session_options(runtime):
    try:
        return runtime.RuntimeSessionOptions(max_tensor_bytes=1 << 30)
    except TypeError:  # a build from before max_tensor_bytes (for before/after figures)
        return None


def run_case(target: str, seeds: list[bytes], seed: int, index: int) -> str:
    import onnx

    import onnx_light.onnx as ol
    from onnx_light.onnx_lib import printer
    from onnx_light.onnx_py._onnxpykernels import runtime

    rng = random.Random(seed * 1_000_003 + index)
    base = rng.choice(seeds)
    data = base
    if target == "bytes":
        data = mutate_bytes(rng, base, seeds)
    elif target == "semantic":
        data = mutate_semantic(rng, base)
    try:
        parsed = onnx.ModelProto.FromString(data)
    except Exception:  # noqa: BLE001 - bytes the onnx package cannot read either
        parsed = None
    opset = 23
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(opset)))
    try:
        model = ol.load_model(data)
        if target != "feeds":
            printer.to_text(model)
        options = session_options(runtime)
        if target == "feeds" and rng.random() < 0.3:
            from onnx_light.onnx_lib import parser
            m = parser.parse_model('<ir_version: 10, opset_import: ["" : 18]>' + STATE_MODEL)
            b = m.graph.persistent_bindings.add()
            b.input_name, b.output_name = "past", "present"
            import numpy as np
            past = np.zeros(2, np.float32)
            if rng.random() < 0.5:
                past = feed_value(rng, np.float32, [2])
            state = runtime.PersistentValueState(m, {"past": past}, options)
            state.run(context, {"x": feed_value(rng, np.float32, [2])})
            return "ok"
        session = runtime.RuntimeSession(model, options)
        if parsed is None:
            return "ok"
        feeds = synthesize_feeds(parsed, rng, mutate=target == "feeds")
        session.run(context, feeds)
        return "ok"
    except (ValueError, TypeError, RuntimeError, NotImplementedError, MemoryError,
            IndexError, KeyError, OverflowError) as e:
        return type(e).__name__


def child_main(target: str, seed: int, start: int, count: int, progress: str) -> None:
    soft = 4 << 30
    resource.setrlimit(resource.RLIMIT_AS, (soft, soft))
    outcomes: dict[str, int] = {}
    with open(progress, "w") as log:
        log.write("init\n")
        log.flush()
        seeds = seed_models()
        for index in range(start, start + count):
            log.write(f"{index}\n")
            log.flush()
            try:
                outcome = run_case(target, seeds, seed, index)
            except MemoryError:
                outcome = "MemoryError"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        log.write("done " + json.dumps(outcomes) + "\n")


# ---- the parent -------------------------------------------------------------------------

def run_child(cmd, env, progress: Path, timeout: float):
    """Runs one batch; a case that makes no progress for `timeout` seconds is a hang (the
    child is killed). Returns (returncode or None for a hang, stderr)."""
    progress.unlink(missing_ok=True)
    err_path = progress.with_suffix(".err")
    with open(err_path, "w") as err_file:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_file, env=env)
        started = time.monotonic()
        while proc.poll() is None:
            time.sleep(0.2)
            last = progress.stat().st_mtime if progress.exists() else None
            idle = time.time() - last if last is not None else time.monotonic() - started
            if idle > timeout:
                proc.kill()
                proc.wait()
                return None, "timeout"
    return proc.returncode, err_path.read_text()[-4000:]


def parent_main(target: str, seconds: float, batch: int, timeout: float, seed: int,
                out_dir: Path) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    progress = out_dir / f"progress_{target}_{os.getpid()}.txt"
    totals = {"cases": 0, "crash": 0, "hang": 0, "oom": 0, "harness_error": 0, "outcomes": {}}
    findings = []
    start, deadline = 0, time.monotonic() + seconds
    env = dict(os.environ)
    while time.monotonic() < deadline:
        cmd = [sys.executable, __file__, "--child", target, str(seed), str(start), str(batch),
               str(progress)]
        rc, err = run_child(cmd, env, progress, timeout)
        lines = progress.read_text().splitlines() if progress.exists() else []
        if lines and lines[-1].startswith("done "):
            for k, v in json.loads(lines[-1][5:]).items():
                totals["outcomes"][k] = totals["outcomes"].get(k, 0) + v
            totals["cases"] += batch
            start += batch
            continue
        last = int(lines[-1]) if lines and lines[-1].isdigit() else start
        if rc is None:
            kind = "hang"
        elif "MemoryError" in err or "bad_alloc" in err or rc == -signal.SIGKILL:
            kind = "oom"
        elif rc < 0:
            kind = "crash"  # killed by a signal (SIGSEGV, SIGABRT, ...)
        else:
            kind = "harness_error"  # the child itself failed (import, setup): not a finding
        totals[kind] += 1
        totals["cases"] += last - start + 1
        findings.append({"kind": kind, "target": target, "seed": seed, "index": last,
                         "returncode": rc, "stderr": err[-1500:]})
        start = last + 1
    progress.unlink(missing_ok=True)
    progress.with_suffix(".err").unlink(missing_ok=True)
    totals["findings"] = findings
    (out_dir / f"findings_{target}.json").write_text(json.dumps(findings, indent=1))
    return totals


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, target, seed, start, count, progress = sys.argv
        child_main(target, int(seed), int(start), int(count), progress)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", choices=["bytes", "semantic", "feeds", "all"], default="all")
    ap.add_argument("--seconds", type=float, default=120, help="per target")
    ap.add_argument("--batch", type=int, default=200, help="cases per child process")
    ap.add_argument("--timeout", type=float, default=20, help="seconds per case (a hang)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("fuzz_out"))
    ap.add_argument("--replay", nargs=3, metavar=("TARGET", "SEED", "INDEX"))
    args = ap.parse_args()
    if args.replay:
        target, seed, index = args.replay
        print(run_case(target, seed_models(), int(seed), int(index)))
        return
    targets = ["bytes", "semantic", "feeds"] if args.target == "all" else [args.target]
    report = {}
    for t in targets:
        totals = parent_main(t, args.seconds, args.batch, args.timeout, args.seed, args.out)
        report[t] = {k: v for k, v in totals.items() if k != "findings"}
        print(t, json.dumps(report[t]), flush=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
