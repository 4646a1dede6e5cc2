#!/usr/bin/python3
"""`--layout`, against numpy: inputs stored channels-last (MLPerf HPC CosmoFlow's [S, D, H, W, C] of int16
counts, an image's [S, H, W, C]), in a .npy file and in an HDF5 data set, read with `--layout x=NDHWC` (NHWC)
and `--transform x=log1p`, train as numpy's transpose of them to channels-first float32, log1p'd, read as
they are: the per-step losses within a relative 1e-6 on one process, and within 1e-4 under D=3, a 2x2x2 grid
of eight processes and N=2 D=2 (as every split). A layout that does not fit is an error naming the file.

    /usr/bin/python3 tests/data/layouts.py --dsl build/cli/dsl

Exit status: 0 when every check passed, 1 when one failed, 77 when this Python cannot import numpy and h5py
(Debian's python3-numpy and python3-h5py, which scripts/test installs: /usr/bin/python3).
"""

import os

from common import arguments, check, close, errors, finish, losses as run_losses, need, ROOT, scratch

h5py, np = need("h5py", "numpy")
VOLUME = os.path.join(ROOT, "samples", "volume_tiny.net")
IMAGE = os.path.join(ROOT, "samples", "mesh_tiny.net")
SPLITS = {
    "one process": "",
    "D=3": os.path.join(ROOT, "samples", "volume_tiny_depth_3.sched"),
    "2x2x2": os.path.join(ROOT, "samples", "volume_tiny_dhw_8.sched"),
    "N=2 D=2": os.path.join(ROOT, "samples", "volume_tiny_hybrid_4.sched"),
}


def losses(args, folder, name, net, sched, *extra):
    return run_losses(args.dsl, folder, name, net, sched, *extra)


def main():
    args = arguments()
    rng = np.random.default_rng(11)
    with scratch("layouts") as (folder, path):
        # Volumes: [S, D, H, W, C] int16 counts, as CosmoFlow stores them, in .npy and HDF5.
        counts = rng.integers(0, 500, size=(8, 16, 16, 16, 2)).astype(np.int16)
        np.save(path("last.npy"), counts)
        with h5py.File(path("last.h5"), "w") as f:
            f.create_dataset("x", data=counts, chunks=(1, 16, 16, 16, 2))
        np.save(path("first.npy"), np.log1p(np.ascontiguousarray(counts.transpose(0, 4, 1, 2, 3)).astype(np.float32)))
        np.save(path("y.npy"), rng.integers(0, 2, size=(8, 8, 8, 8)).astype(np.int32))
        y = "y=" + path("y.npy")
        want = losses(args, folder, "numpy", VOLUME, "", "--data", "x=" + path("first.npy"), "--data", y)
        for name, sched in SPLITS.items():
            got = losses(args, folder, "npy " + name, VOLUME, sched, "--data", "x=" + path("last.npy"), "--data", y,
                         "--layout", "x=NDHWC", "--transform", "x=log1p")
            tolerance = 1e-6 if not sched else 1e-4
            check(close(got, want, tolerance), f"NDHWC .npy, {name}: {got} against numpy's {want}")
        got = losses(args, folder, "h5 2x2x2", VOLUME, SPLITS["2x2x2"], "--data", "x=" + path("last.h5") + ":/x",
                     "--data", y, "--layout", "x=NDHWC", "--transform", "x=log1p")
        check(close(got, want, 1e-4), f"NDHWC HDF5 data set, 2x2x2: {got} against numpy's {want}")

        # Images: [S, H, W, C].
        image = rng.standard_normal(size=(4, 64, 64, 18)).astype(np.float32)
        np.save(path("image_last.npy"), image)
        np.save(path("image_first.npy"), np.ascontiguousarray(image.transpose(0, 3, 1, 2)))
        np.save(path("cells.npy"), rng.integers(0, 2, size=(4, 8, 8)).astype(np.int32))
        cells = "y=" + path("cells.npy")
        want = losses(args, folder, "image numpy", IMAGE, "", "--data", "x=" + path("image_first.npy"), "--data",
                      cells)
        got = losses(args, folder, "image NHWC", IMAGE, os.path.join(ROOT, "samples", "mesh_tiny_spatial_hw_4.sched"),
                     "--data", "x=" + path("image_last.npy"), "--data", cells, "--layout", "x=NHWC")
        check(close(got, want, 1e-4), f"NHWC .npy under H=2 W=2: {got} against numpy's {want}")

        # What does not fit is said.
        cases = [
            (VOLUME, ["--data", "x=" + path("last.npy"), "--data", y], "holds [8, 16, 16, 16, 2], but input 'x' is [N, 2, 16, 16, 16]: expected [S, 2, 16, 16, 16] with S > 0 "
             "(stored channels-last? --layout x=NDHWC)"),
            (VOLUME, ["--data", "x=" + path("first.npy"), "--data", y, "--layout", "x=NDHWC"],
             "stored channels-last (--layout x=NDHWC)"),
            (VOLUME, ["--data", "x=" + path("last.npy"), "--data", y, "--layout", "x=NHWC"],
             "its file is NCDHW (channels first, the default) or NDHWC"),
            (VOLUME, ["--data", "x=" + path("last.npy"), "--data", y, "--layout", "y=NDHWC"],
             "'y' is not one"),
            (VOLUME, ["--layout", "x=NDHWC"], "--layout applies to data from files"),
        ]
        errors(args.dsl, [(extra, lambda: None, message) for _, extra, message in cases], VOLUME, "--steps", "1",
               "--batch", "4")
    return finish("layouts")


if __name__ == "__main__":
    raise SystemExit(main())
