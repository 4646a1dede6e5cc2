#!/usr/bin/python3
"""`dsl run --prefetch K` (issue 49): reading the data files ahead of the step changes no value. Training with
--prefetch 0 (every read when the step asks for it), 2 (the default) and 5, from a .npy file with --shuffle and
--augment flip, and from a collection of HDF5 files with --shuffle and --transform, on one process and on two
(a split of the samples and one of the rows), logs the same losses, bit for bit, and saves the same checkpoint,
byte for byte. A read that fails on the reader thread (a transform that turns a value of a later sample into
nan) stops the run at the same step with the same message and exit status as without it; --prefetch -1 and
--prefetch 1.5 are usage errors (exit 2). `dsl explain` shows the read term: the input and label bytes a
process reads per step at the platform's io_bandwidth, hidden behind the step's compute or not.

    /usr/bin/python3 tests/data/prefetch.py --dsl build/cli/dsl

Exit status: 0 when every check passed, 1 when one failed, 77 when this Python cannot import numpy and h5py
(Debian's python3-numpy and python3-h5py, which scripts/test installs: /usr/bin/python3).
"""

import json
import os

from common import arguments, check, dsl, finish, need, ROOT, scratch

h5py, np = need("h5py", "numpy")

IMAGE = os.path.join(ROOT, "samples", "mesh_tiny.net")
VOLUME = os.path.join(ROOT, "samples", "volume_tiny.net")


def files_of(folder):
    """Every file under `folder`, by its path within it, with its bytes."""
    out = {}
    for top, _, names in os.walk(folder):
        for n in names:
            with open(os.path.join(top, n), "rb") as f:
                out[os.path.relpath(os.path.join(top, n), folder)] = f.read()
    return out


def train(args, folder, name, net, sched, prefetch, *extra, steps=7, batch=2, load=None):
    """The log's lines (each step's JSON, without its timings) and the checkpoint's files, or None."""
    log = os.path.join(folder, name + ".jsonl")
    save = os.path.join(folder, name + "-ckpt")
    r = dsl(args.dsl, "run", net, *([sched] if sched else []), "--steps", str(steps), "--batch", str(batch), "--lr",
            "0.05", "--log", log, "--save", save, "--prefetch", str(prefetch), *(["--load", load] if load else []),
            *extra)
    if r.returncode != 0:
        check(False, f"{name}: dsl run failed:\n{r.stderr}")
        return None
    lines = []
    with open(log) as f:
        for line in f:
            j = json.loads(line)
            for timing in ("seconds", "seconds_left", "samples_per_second"):
                j.pop(timing, None)
            lines.append(j)
    return lines, files_of(save)


def same_runs(args, folder, name, net, sched, *extra):
    """--prefetch 0, 2 and 5 give the same losses and checkpoints, bitwise."""
    runs = {k: train(args, folder, f"{name}-{k}", net, sched, k, *extra) for k in (0, 2, 5)}
    base = runs[0]
    for k in (2, 5):
        got = runs[k]
        if base is None or got is None:
            continue
        losses = [j.get("loss") for j in got[0]]
        check(got[0] == base[0], f"{name}: --prefetch {k} logs the losses of --prefetch 0: {losses} against "
              f"{[j.get('loss') for j in base[0]]}")
        differ = sorted(p for p in set(got[1]) | set(base[1]) if got[1].get(p) != base[1].get(p))
        check(bool(base[1]) and not differ,
              f"{name}: --prefetch {k} saves the checkpoint of --prefetch 0 ({len(base[1])} files; differing: "
              f"{differ})")
    return base


def main():
    args = arguments()
    rng = np.random.default_rng(49)
    with scratch("prefetch") as (folder, path):
        # A .npy file: 10 samples, 5 steps an epoch, so that 7 steps cross into a second shuffled epoch.
        S = 10
        np.save(path("x.npy"), rng.standard_normal((S, 18, 64, 64)).astype(np.float32))
        np.save(path("y.npy"), rng.integers(0, 2, size=(S, 8, 8)).astype(np.int32))
        npy = ("--data", "x=" + path("x.npy"), "--data", "y=" + path("y.npy"), "--shuffle", "--augment", "flip")
        straight = same_runs(args, folder, "npy", IMAGE, "", *npy)
        # Resumed at step 4 (the reader starts from the step the checkpoint holds): the same checkpoint at step 7.
        first = train(args, folder, "npy-first", IMAGE, "", 2, *npy, steps=4)
        resumed = train(args, folder, "npy-resumed", IMAGE, "", 2, *npy, steps=3, load=path("npy-first-ckpt"))
        check(straight is not None and first is not None and resumed is not None and resumed[1] == straight[1] and
              resumed[0] == straight[0][4:],
              "--prefetch 2 resumed at step 4: the losses and checkpoint of 7 steps straight with --prefetch 0")
        for sched in ("mesh_tiny_sample_2.sched", "mesh_tiny_spatial_h_2.sched"):
            same_runs(args, folder, "npy-" + sched, IMAGE, os.path.join(ROOT, "samples", sched), *npy)

        # A collection: a file of int16 counts per sample (LBANN's CosmoFlow layout), read through log1p.
        os.makedirs(path("boxes"))
        counts = rng.integers(0, 500, size=(S, 2, 16, 16, 16)).astype(np.int16)
        labels = rng.integers(0, 2, size=(S, 8, 8, 8)).astype(np.int32)
        for s in range(S):
            with h5py.File(path("boxes", f"box{s:04d}.h5"), "w") as f:
                f.create_dataset("full", data=counts[s])
                f.create_dataset("y", data=labels[s])
        boxes = ("--data", "x=" + path("boxes", "*.h5") + ":/full", "--data", "y=" + path("boxes", "*.h5") + ":/y",
                 "--shuffle", "--transform", "x=log1p")
        same_runs(args, folder, "collection", VOLUME, "", *boxes)
        with open(path("depth_2.sched"), "w") as f:
            f.write("procs = 2\nbatch = 2\n\ndefault D=2 overlap=on\n")
        same_runs(args, folder, "collection-D=2", VOLUME, path("depth_2.sched"), *boxes)

        # A read that fails ahead: sample 7 holds -2, which log1p turns into nan, so that the fourth step (samples
        # 6 and 7) stops the run, after three steps, as it does without reading ahead.
        bad = rng.random((S, 18, 64, 64)).astype(np.float32)
        bad[7, 3, 10, 20] = -2.0
        np.save(path("bad.npy"), bad)
        bad_args = ("--data", "x=" + path("bad.npy"), "--data", "y=" + path("y.npy"), "--transform", "x=log1p")
        outcomes = {}
        for sched in ("", os.path.join(ROOT, "samples", "mesh_tiny_sample_2.sched")):
            for k in (0, 2, 5):
                r = dsl(args.dsl, "run", IMAGE, *([sched] if sched else []), "--steps", "8", "--batch", "2",
                        "--prefetch", str(k), *bad_args)
                steps = [line.split()[1] for line in r.stdout.splitlines() if line.startswith("step ")]
                said = [line for line in r.stderr.splitlines() if "error" in line and "ORTE" not in line]
                outcomes[(sched, k)] = (r.returncode, said, steps)
            where = " on 2 processes" if sched else ""
            base = outcomes[(sched, 0)]
            check(base[0] == 1 and len(base[1]) == 1 and "sample 7" in base[1][0] and "nan" in base[1][0] and
                  base[2] == ["1", "2", "3"],
                  f"without reading ahead{where}: exit 1 after 3 steps, naming sample 7: {base}")
            for k in (2, 5):
                got = outcomes[(sched, k)]
                check(got == base, f"--prefetch {k}{where}: the read's error as without reading ahead: {got} "
                      f"against {base}")
                check(not any("internal error" in e or "terminate" in e for e in got[1]),
                      f"--prefetch {k}{where}: a user error, not a crash: {got[1]}")

        # Bad values: a usage error, as any bad flag's.
        for value in ("-1", "1.5", "two"):
            r = dsl(args.dsl, "run", IMAGE, "--steps", "1", "--prefetch", value)
            check(r.returncode == 2 and "--prefetch" in r.stderr,
                  f"--prefetch {value}: exit {r.returncode} (2 wanted): {r.stderr.strip()}")

        # The model's read term: the bytes of the input and label tiles each process reads per step at the
        # platform's io_bandwidth (1 GB/s where it gives none); hidden behind the step's compute unless it is
        # longer.
        with open(os.path.join(ROOT, "stdlib", "platforms", "lassen.platform")) as f:
            lassen = f.read()
        slow = path("slow.platform")
        with open(slow, "w") as f:
            f.write(lassen + "\nio_bandwidth = 1 MB/s\n")
        sched = os.path.join(ROOT, "samples", "mesh_tiny_spatial_h_2.sched")
        predictions = {}
        for name, platform in (("default", "lassen"), ("slow", slow)):
            r = dsl(args.dsl, "explain", IMAGE, sched, "--batch", "4", "--platform", platform, "--json")
            check(r.returncode == 0, f"dsl explain --platform {name}: {r.stderr}")
            if r.returncode != 0:
                continue
            predictions[name] = json.loads(r.stdout)
        if len(predictions) == 2:
            d, s = predictions["default"], predictions["slow"]
            # Each process reads its half of the rows of 4 samples: 18x32x64 floats, and 4x4x8 int32 labels.
            want = 4 * (18 * 32 * 64 + 4 * 8) * 4
            check(d["read_bytes"] == want and s["read_bytes"] == want,
                  f"read bytes per step per process: {d['read_bytes']}, {s['read_bytes']} against {want}")
            check(d["io_bandwidth"] == 1e9 and s["io_bandwidth"] == 1e6,
                  f"io_bandwidth: {d['io_bandwidth']} (the default) and {s['io_bandwidth']}")
            ds, ss = d["seconds"], s["seconds"]
            rest = ds["forward"] + ds["backward"] + ds["allreduce_exposed"] + ds["update"]
            check(abs(ds["read"] - want / 1e9) < 1e-12 and ds["read_exposed"] == 0 and
                  abs(ds["step"] - rest) <= 1e-9 * rest,
                  f"a fast read is hidden behind the step: {ds}")
            check(abs(ss["read"] - want / 1e6) < 1e-9 and abs(ss["step"] - ss["read"]) <= 1e-9 * ss["read"] and
                  abs(ss["read_exposed"] - (ss["read"] - rest)) <= 1e-9 * ss["read"],
                  f"a slow read makes the step (what it takes beyond the compute is exposed): {ss}")
        r = dsl(args.dsl, "explain", IMAGE, sched, "--batch", "4", "--platform", slow)
        line = next((l for l in r.stdout.splitlines() if l.startswith("read ")), "")
        check(r.returncode == 0 and "0.001 GB/s (io_bandwidth)" in line and "not hidden" in line,
              f"dsl explain's read line: '{line}'")
        # Its timeline: the read not hidden is the first input's wait, as a measured run names it.
        trace = path("predicted.json")
        r = dsl(args.dsl, "explain", IMAGE, sched, "--batch", "4", "--platform", slow, "--trace", trace)
        if r.returncode == 0 and "slow" in predictions:
            with open(trace) as f:
                spans = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
            waits = [e for e in spans if e["name"] == "x wait for a read ahead (--prefetch)"]
            exposed = predictions["slow"]["seconds"]["read_exposed"] * 1e6
            end = max(e["ts"] + e["dur"] for e in spans)
            check(len(waits) == 1 and abs(waits[0]["dur"] - exposed) <= 1e-3 and
                  abs(end - predictions["slow"]["seconds"]["step"] * 1e6) <= 1e-3,
                  f"dsl explain --trace: the exposed read as x's wait ({waits}, {exposed} us), the step to {end} us")
        else:
            check(False, f"dsl explain --trace: {r.stderr}")
        r = dsl(args.dsl, "explain", IMAGE, sched, "--batch", "4", "--platform", "lassen")
        line = next((l for l in r.stdout.splitlines() if l.startswith("read ")), "")
        check(r.returncode == 0 and "1 GB/s (io_bandwidth)" in line and "hidden behind" in line,
              f"dsl explain's read line, the default io_bandwidth: '{line}'")
    return finish("prefetch")


if __name__ == "__main__":
    raise SystemExit(main())
