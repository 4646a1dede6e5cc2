#!/usr/bin/python3
"""`--transform`, against numpy: an input stored as int16 counts (MLPerf HPC CosmoFlow's storage) and read with
`--transform x=log1p` (and a chain, `clip(A, B),sqrt`) trains as the same samples converted and transformed by
numpy into a float32 file and read as they are: the per-step losses within a relative 1e-6 on one process, and
within 1e-4 under H=2 and under N=2 H=2 on four (as every split), with --normalize after the transform. The bad
uses are errors that name what is wrong: an unknown function, a label, synthetic data, an input given twice, and
a value that a transform makes not finite (naming the file and the sample). Every storage type (int8, uint8,
int16, uint16, float16, float32 and float64, in .npy files and, where h5py is there, HDF5 data sets) holding the
same small whole numbers trains exactly as float32 does, and so with --transform x=log1p (the small integer
types through a table of results made once).

    /usr/bin/python3 tests/data/transforms.py --dsl build/cli/dsl

Exit status: 0 when every check passed, 1 when one failed, 77 when this Python cannot import numpy (Debian's
python3-numpy, which scripts/test installs: /usr/bin/python3).
"""

import json
import os

from common import arguments, check, close, dsl, errors, finish, losses as run_losses, need, ROOT, scratch

np, = need("numpy")

NET = os.path.join(ROOT, "samples", "mesh_tiny.net")
SCHEDS = {
    "one process": os.path.join(ROOT, "samples", "mesh_tiny_serial_1.sched"),
    "H=2": os.path.join(ROOT, "samples", "mesh_tiny_spatial_h_2.sched"),
    "N=2 H=2": os.path.join(ROOT, "samples", "mesh_tiny_hybrid_4.sched"),
}


def losses(args, folder, name, sched, data, *extra):
    return run_losses(args.dsl, folder, name, NET, sched, "--data", "x=" + data[0], "--data", "y=" + data[1], *extra,
                      steps=4)


def main():
    args = arguments()
    rng = np.random.default_rng(7)
    with scratch("transforms") as (folder, path):
        # Counts as CosmoFlow stores them, int16, and labels.
        counts = rng.integers(0, 3000, size=(8, 18, 64, 64)).astype(np.int16)
        np.save(path("counts.npy"), counts)
        np.save(path("y.npy"), rng.integers(0, 2, size=(8, 8, 8)).astype(np.int32))
        np.save(path("log1p.npy"), np.log1p(counts.astype(np.float32)))
        np.save(path("chain.npy"), np.sqrt(np.clip(counts.astype(np.float32), 10.0, 2000.0)))
        stored = (path("counts.npy"), path("y.npy"))

        for name, sched in SCHEDS.items():
            want = losses(args, folder, "numpy-" + name, SCHEDS["one process"], (path("log1p.npy"), path("y.npy")),
                          "--normalize", "7,1.1")
            got = losses(args, folder, "log1p-" + name, sched, stored, "--transform", "x=log1p", "--normalize",
                         "7,1.1")
            tolerance = 1e-6 if name == "one process" else 1e-4
            check(close(got, want, tolerance),
                  f"--transform x=log1p, {name}: losses {got} against numpy's {want} (within {tolerance})")
        want = losses(args, folder, "numpy-chain", SCHEDS["one process"], (path("chain.npy"), path("y.npy")))
        got = losses(args, folder, "chain", SCHEDS["H=2"], stored, "--transform", "x=clip(10, 2000), sqrt")
        check(close(got, want, 1e-4), f"--transform 'x=clip(10, 2000), sqrt' under H=2: {got} against {want}")
        untransformed = losses(args, folder, "as-stored", SCHEDS["one process"], stored, "--normalize", "7,1.1")
        check(untransformed is not None and not close(untransformed, want, 1e-3),
              "the transform changes what is trained on")

        # What is wrong is said, before training where it can be.
        negative = counts.astype(np.float32)
        negative[5, 3, 10, 20] = -2.0
        np.save(path("negative.npy"), negative)
        cases = [
            (["--data", "x=" + stored[0], "--data", "y=" + stored[1], "--transform", "x=log2"],
             "--transform x=log2: 'log2' is not a transform"),
            (["--data", "x=" + stored[0], "--data", "y=" + stored[1], "--transform", "x=clip(3)"],
             "clip takes two numbers"),
            (["--data", "x=" + stored[0], "--data", "y=" + stored[1], "--transform", "y=log1p"],
             "'y' is not an input"),
            (["--data", "x=" + stored[0], "--data", "y=" + stored[1], "--transform", "x=log1p", "--transform",
              "x=sqrt"], "input 'x' is given twice"),
            (["--transform", "x=log1p"], "--transform applies to data from files"),
            (["--data", "x=" + path("negative.npy"), "--data", "y=" + stored[1], "--transform", "x=log1p"],
             path("negative.npy") + ": sample 5, channel 3: --transform x=log1p turns -2 into nan"),
        ]
        errors(args.dsl, [(extra, lambda: None, message) for extra, message in cases], NET, SCHEDS["one process"],
               "--steps", "2", "--batch", "4", before_steps=False)
        # eval and predict read the same way.
        r = dsl(args.dsl, "run", NET, SCHEDS["one process"], "--steps", "1", "--batch", "4", "--save", path("ck"),
                "--data", "x=" + stored[0], "--data", "y=" + stored[1], "--transform", "x=log1p")
        check(r.returncode == 0, "a checkpoint to evaluate\n" + r.stderr)
        a = dsl(args.dsl, "eval", NET, "--load", path("ck"), "--data", "x=" + stored[0], "--data", "y=" + stored[1],
                "--transform", "x=log1p", "--json")
        b = dsl(args.dsl, "eval", NET, "--load", path("ck"), "--data", "x=" + path("log1p.npy"), "--data",
                "y=" + stored[1], "--json")
        check(a.returncode == 0 and b.returncode == 0 and
              abs(json.loads(a.stdout)["loss"] - json.loads(b.stdout)["loss"]) <= 1e-6 * abs(json.loads(b.stdout)["loss"]),
              f"dsl eval --transform x=log1p gives numpy's figures\n{a.stderr}{b.stderr}")
        storage_types(args, folder, path, rng)
    return finish("transforms")


def storage_types(args, folder, path, rng):
    """Whole numbers in [0, 100), exact in every type: the losses of each storage type equal float32's."""
    try:
        import h5py
    except ImportError:
        h5py = None
        print("note: no h5py: the HDF5 storage types are not checked here")
    values = rng.integers(0, 100, size=(8, 18, 64, 64))
    labels = path("y.npy")
    np.save(path("as_float32.npy"), values.astype(np.float32))
    want = losses(args, folder, "float32", SCHEDS["one process"], (path("as_float32.npy"), labels))
    want_log1p = losses(args, folder, "float32 log1p", SCHEDS["one process"], (path("as_float32.npy"), labels),
                        "--transform", "x=log1p")
    for dtype in ("int8", "uint8", "int16", "uint16", "float16", "float32", "float64"):
        files = [path(f"as_{dtype}.npy")]
        np.save(files[0], values.astype(dtype))
        if h5py is not None:
            with h5py.File(path(f"as_{dtype}.h5"), "w") as f:
                f.create_dataset("x", data=values.astype(dtype))
            files.append(path(f"as_{dtype}.h5") + ":/x")
        for data in files:
            got = losses(args, folder, os.path.basename(data).replace(":/", "_"), SCHEDS["one process"],
                         (data, labels))
            check(got is not None and got == want, f"{dtype} storage ({data}): losses {got} against float32's {want}")
        # Transformed: a small integer type's values are looked up in a table made once, float32's computed as
        # they are read; the same floats.
        got = losses(args, folder, f"{dtype} log1p", SCHEDS["one process"], (files[0], labels), "--transform",
                     "x=log1p")
        check(got is not None and got == want_log1p,
              f"{dtype} storage with --transform x=log1p: losses {got} against float32's {want_log1p}")


if __name__ == "__main__":
    raise SystemExit(main())
