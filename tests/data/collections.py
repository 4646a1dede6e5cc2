#!/usr/bin/python3
"""Collections of data files (`--data NAME=PATTERN`), against numpy: a folder of per-sample HDF5 files (LBANN's
CosmoFlow: one file a box, an int16 data set and the labels beside it), a folder of channels-last int16 .npy
pairs (MLPerf HPC's), files of blocks of samples named by a list, and a glob, each read with `--transform
x=log1p`, train as the same samples joined by numpy into one float32 file: the per-step losses within a
relative 1e-6 on one process and 1e-4 under D=3, a 2x2x2 grid and N=2 D=2; --shuffle across the files as
across the joined file. A corrupt, missing or wrongly shaped file among 64 is an error naming it before the
first step, and so are inputs and labels that do not pair by file. A file of a collection of more files than
the run keeps open, rewritten while the run reads it, stops the run with an error naming it, as a single file
does. `dsl predict --output 'out/{stem}.npy'`
writes one output per input file, equal to the joined prediction's samples of that file, on one process and
on four; an output pattern without a collection, or two files of one stem, is an error before any work.

    /usr/bin/python3 tests/data/collections.py --dsl build/cli/dsl

Exit status: 0 when every check passed, 1 when one failed, 77 when this Python cannot import numpy and h5py
(Debian's python3-numpy and python3-h5py, which scripts/test installs: /usr/bin/python3).
"""

import json
import os
import subprocess
import time

from common import arguments, check, close, dsl, errors, finish, losses as run_losses, need, ROOT, scratch

h5py, np = need("h5py", "numpy")

VOLUME = os.path.join(ROOT, "samples", "volume_tiny.net")
SPLITS = {
    "one process": "",
    "D=3": os.path.join(ROOT, "samples", "volume_tiny_depth_3.sched"),
    "2x2x2": os.path.join(ROOT, "samples", "volume_tiny_dhw_8.sched"),
    "N=2 D=2": os.path.join(ROOT, "samples", "volume_tiny_hybrid_4.sched"),
}


def losses(args, folder, name, sched, *extra, steps=3):
    return run_losses(args.dsl, folder, name, VOLUME, sched, *extra, steps=steps)


def main():
    args = arguments()
    rng = np.random.default_rng(5)
    with scratch("collections") as (folder, path):
        S = 8
        counts = rng.integers(0, 500, size=(S, 2, 16, 16, 16)).astype(np.int16)  # [S, C, D, H, W]
        labels = rng.integers(0, 2, size=(S, 8, 8, 8)).astype(np.int32)
        np.save(path("joined_x.npy"), np.log1p(counts.astype(np.float32)))
        np.save(path("joined_y.npy"), labels)
        joined = ("--data", "x=" + path("joined_x.npy"), "--data", "y=" + path("joined_y.npy"))

        # LBANN's layout: a file per box, its int16 counts and its labels as two data sets.
        os.makedirs(path("boxes"))
        for s in range(S):
            with h5py.File(path("boxes", f"box{s:04d}.h5"), "w") as f:
                f.create_dataset("full", data=counts[s])
                f.create_dataset("y", data=labels[s])
        # MLPerf's: channels-last int16 .npy pairs, a folder each.
        os.makedirs(path("mlperf", "x"))
        os.makedirs(path("mlperf", "y"))
        for s in range(S):
            np.save(path("mlperf", "x", f"s{s:03d}.npy"), np.ascontiguousarray(counts[s].transpose(1, 2, 3, 0)))
            np.save(path("mlperf", "y", f"s{s:03d}.npy"), labels[s])
        # Blocks of three, two and three samples, named by lists (relative to the list's folder).
        os.makedirs(path("blocks"))
        for i, (a, b) in enumerate([(0, 3), (3, 5), (5, 8)]):
            np.save(path("blocks", f"x{i}.npy"), counts[a:b])
            np.save(path("blocks", f"y{i}.npy"), labels[a:b])
        with open(path("blocks", "x.txt"), "w") as f:
            f.write("x0.npy\nx1.npy\n# a comment\nx2.npy\n")
        with open(path("blocks", "y.txt"), "w") as f:
            f.write("y0.npy\ny1.npy\ny2.npy\n")

        forms = {
            "per-sample HDF5 files (a glob)": ("--data", "x=" + path("boxes", "*.h5") + ":/full",
                                               "--data", "y=" + path("boxes", "*.h5") + ":/y"),
            "channels-last .npy pairs (folders)": ("--data", "x=" + path("mlperf", "x"), "--data",
                                                   "y=" + path("mlperf", "y"), "--layout", "x=NDHWC"),
            "blocks of samples (lists)": ("--data", "x=@" + path("blocks", "x.txt"),
                                          "--data", "y=@" + path("blocks", "y.txt")),
        }
        want = losses(args, folder, "joined", "", *joined)
        for form, data in forms.items():
            for name, sched in SPLITS.items():
                if form != "per-sample HDF5 files (a glob)" and name in ("D=3", "N=2 D=2"):
                    continue  # each form under one process and the 2x2x2 grid; LBANN's under every split
                got = losses(args, folder, form + " " + name, sched, *data, "--transform", "x=log1p")
                tolerance = 1e-6 if not sched else 1e-4
                check(close(got, want, tolerance), f"{form}, {name}: {got} against numpy's {want}")
        shuffled = losses(args, folder, "joined shuffled", "", *joined, "--shuffle", steps=4)
        got = losses(args, folder, "boxes shuffled", "", *forms["per-sample HDF5 files (a glob)"], "--transform",
                     "x=log1p", "--shuffle", steps=4)
        check(close(got, shuffled, 1e-6), f"--shuffle across files: {got} against the joined file's {shuffled}")

        # 64 files, one of them bad at a time: named before the first step.
        os.makedirs(path("many"))
        for s in range(64):
            np.save(path("many", f"s{s:03d}.npy"), counts[s % S])
        np.save(path("many_y.npy"), labels[np.arange(64) % S])
        bad = path("many", "s037.npy")
        many = ("--data", "x=" + path("many"), "--data", "y=" + path("many_y.npy"))

        def garbage(f):
            with open(f, "wb") as out:
                out.write(b"not a .npy file at all")

        cases = [
            (many, lambda: garbage(bad), bad + ": not a .npy file"),
            (many, lambda: np.save(bad, counts[0][:, :8]), bad + ": holds samples of [2, 8, 16, 16]"),
            (many, lambda: os.remove(bad), "many_y.npy: holds [64, 8, 8, 8]"),
        ]
        with open(path("list.txt"), "w") as f:
            f.write("many/s000.npy\nmany/missing.npy\n")
        cases.append((("--data", "x=@" + path("list.txt"), "--data", "y=" + path("many_y.npy")), lambda: None,
                      path("many", "missing.npy") + ": cannot open"))
        cases.append((("--data", "x=" + path("mlperf", "x"), "--data", "y=@" + path("blocks", "y.txt"), "--layout",
                       "x=NDHWC"), lambda: None, "inputs and labels pair by file"))
        cases.append((("--data", "x=" + path("nothing", "*.npy"), "--data", "y=" + path("many_y.npy")), lambda: None,
                      "no file matches the pattern"))
        errors(args.dsl, cases, VOLUME, "--steps", "1", "--batch", "4")
        rewritten(args, path, counts, labels)
        predict_per_file(args, path, joined)
    return finish("collections")


def rewritten(args, path, counts, labels):
    """20 files, more than the run keeps open: one rewritten in place while the run reads them stops it, named,
    whether the run holds it open then or opens it again."""
    os.makedirs(path("twenty"))
    for s in range(20):
        np.save(path("twenty", f"s{s:03d}.npy"), counts[s % len(counts)])
    np.save(path("twenty_y.npy"), labels[np.arange(20) % len(labels)])
    log = path("twenty.jsonl")
    run = subprocess.Popen([args.dsl, "run", VOLUME, "--steps", "1000000", "--batch", "4", "--log", log, "--data",
                            "x=" + path("twenty"), "--data", "y=" + path("twenty_y.npy")],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(6000):
        if run.poll() is not None or (os.path.exists(log) and os.path.getsize(log) > 0):
            break
        time.sleep(0.01)
    bad = path("twenty", "s003.npy")
    np.save(bad, counts[5] + 1)
    try:
        out, err = run.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        run.kill()
        out, err = run.communicate()
    steps = sum(1 for line in open(log) if '"loss"' in line) if os.path.exists(log) else 0
    check(run.returncode == 1 and bad + ": the file changed while the run read it" in err and steps > 0 and
          "internal error" not in err,
          f"a file of 20 rewritten in place: exit {run.returncode} after {steps} steps\n{err.strip()[-600:]}")


def predict_per_file(args, path, joined):
    """`dsl predict --output 'out/{stem}.npy'` over the lists' blocks of 3, 2 and 3 samples: each output holds
    its file's samples of the joined data's prediction, bitwise, on one process and on four."""
    r = dsl(args.dsl, "run", VOLUME, "--steps", "2", "--batch", "4", "--save", path("ck"), *joined)
    check(r.returncode == 0, f"the checkpoint to predict with: exit {r.returncode}\n{r.stderr}")
    common = ("--load", path("ck"), "--batch", "4")
    # The same int16 counts in one file, transformed as they are read, as the blocks are.
    np.save(path("joined_counts.npy"), np.concatenate([np.load(path("blocks", f"x{i}.npy")) for i in range(3)]))
    r = dsl(args.dsl, "predict", VOLUME, *common, "--data", "x=" + path("joined_counts.npy"), "--transform",
            "x=log1p", "--output", path("all.npy"))
    check(r.returncode == 0, f"predict of the joined file: exit {r.returncode}\n{r.stderr}")
    whole = np.load(path("all.npy"))
    for name, sched in (("one process", ""), ("N=2 D=2", SPLITS["N=2 D=2"])):
        out = path("out " + name.replace(" ", "_"))
        os.makedirs(out)
        r = dsl(args.dsl, "predict", VOLUME, *([sched] if sched else []), *common, "--data",
                "x=@" + path("blocks", "x.txt"), "--transform", "x=log1p", "--output", os.path.join(out, "{stem}.npy"))
        check(r.returncode == 0 and "wrote 3 outputs" in r.stdout,
              f"predict per file, {name}: exit {r.returncode}\n{r.stdout}{r.stderr}")
        for stem, (a, b) in zip(("x0", "x1", "x2"), [(0, 3), (3, 5), (5, 8)]):
            f = os.path.join(out, stem + ".npy")
            got = np.load(f) if os.path.exists(f) else None
            check(got is not None and got.shape == whole[a:b].shape and np.array_equal(got, whole[a:b]),
                  f"predict per file, {name}: {stem}.npy holds samples {a} to {b - 1} of the joined prediction")
    r = dsl(args.dsl, "predict", VOLUME, *common, "--data", "x=" + path("joined_x.npy"), "--output",
            path("{stem}.npy"))
    check(r.returncode == 1 and "is not read from a collection of files" in r.stderr,
          f"an output per file of one file: exit {r.returncode}\n{r.stderr}")
    os.makedirs(path("again"))
    np.save(path("again", "x0.npy"), np.load(path("blocks", "x0.npy")))
    with open(path("same_stem.txt"), "w") as f:
        f.write("blocks/x0.npy\nagain/x0.npy\n")
    r = dsl(args.dsl, "predict", VOLUME, *common, "--data", "x=@" + path("same_stem.txt"), "--output",
            path("{stem}.npy"))
    check(r.returncode == 1 and "would both be written to" in r.stderr and not os.path.exists(path("x0.npy")),
          f"two files of one stem: exit {r.returncode}\n{r.stderr}")


if __name__ == "__main__":
    raise SystemExit(main())
