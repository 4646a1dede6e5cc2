#!/usr/bin/python3
"""`dsl run --augment flip,transpose`: every split trains on the same augmented samples as one process (the
per-step losses within a relative 1e-4, as every split), the augmentation changes what is trained on, and a
data set that every flip and transposition leaves as it is (each sample a function of the sorted distances of
a voxel from the centre) trains exactly as without augmentation: each process's tile of an augmented sample is
read from the right place, and the labels move with their inputs.

    /usr/bin/python3 tests/data/augment.py --dsl build/cli/dsl

Exit status: 0 when every check passed, 1 when one failed, 77 when this Python cannot import numpy (Debian's
python3-numpy, which scripts/test installs: /usr/bin/python3).
"""

import os

from common import arguments, check, close, finish, losses as run_losses, need, ROOT, scratch

np, = need("numpy")

VOLUME = os.path.join(ROOT, "samples", "volume_tiny.net")
IMAGE = os.path.join(ROOT, "samples", "mesh_tiny.net")


def losses(args, folder, name, net, sched, *extra):
    return run_losses(args.dsl, folder, name, net, sched, *extra, steps=4)


def symmetric(rng, samples, channels, extent):
    """Samples [S, C, extent^3] that every flip and transposition of the cube leaves as they are."""
    centre = (extent - 1) / 2
    d = np.abs(np.arange(extent) - centre)
    grid = np.stack(np.meshgrid(d, d, d, indexing="ij"), axis=-1)
    key = np.sort(grid, axis=-1)  # the sorted distances: the same under the cube's symmetries
    out = np.empty((samples, channels, extent, extent, extent), dtype=np.float32)
    for s in range(samples):
        for c in range(channels):
            w = rng.standard_normal(3)
            out[s, c] = np.sin(key @ w)
    return out, key


def main():
    args = arguments()
    rng = np.random.default_rng(3)
    with scratch("augment") as (folder, path):
        x = rng.standard_normal((8, 2, 16, 16, 16)).astype(np.float32)
        y = rng.integers(0, 2, size=(8, 8, 8, 8)).astype(np.int32)
        np.save(path("x.npy"), x)
        np.save(path("y.npy"), y)
        data = ("--data", "x=" + path("x.npy"), "--data", "y=" + path("y.npy"))
        one = losses(args, folder, "one", VOLUME, "", *data, "--augment", "flip,transpose")
        plain = losses(args, folder, "plain", VOLUME, "", *data)
        check(one is not None and plain is not None and not close(one, plain, 1e-3),
              f"the augmentation changes what is trained on: {one} against {plain}")
        for sched in ("volume_tiny_depth_3.sched", "volume_tiny_dhw_8.sched", "volume_tiny_hybrid_4.sched"):
            got = losses(args, folder, sched, VOLUME, os.path.join(ROOT, "samples", sched), *data, "--augment",
                         "flip,transpose")
            check(close(got, one, 1e-4), f"--augment flip,transpose under {sched}: {got} against one process's {one}")
        flips = losses(args, folder, "flips", VOLUME, os.path.join(ROOT, "samples", "volume_tiny_dhw_8.sched"), *data,
                       "--augment", "flip")
        flips_one = losses(args, folder, "flips one", VOLUME, "", *data, "--augment", "flip")
        check(close(flips, flips_one, 1e-4) and not close(flips, one, 1e-3),
              f"--augment flip under 2x2x2: {flips} against one process's {flips_one}")

        # Images: H and W transposed, the 8x8 cell labels with them.
        image = rng.standard_normal((8, 18, 64, 64)).astype(np.float32)
        cells = rng.integers(0, 2, size=(8, 8, 8)).astype(np.int32)
        np.save(path("image.npy"), image)
        np.save(path("cells.npy"), cells)
        images = ("--data", "x=" + path("image.npy"), "--data", "y=" + path("cells.npy"))
        want = losses(args, folder, "image one", IMAGE, "", *images, "--augment", "flip,transpose")
        got = losses(args, folder, "image hw4", IMAGE, os.path.join(ROOT, "samples", "mesh_tiny_spatial_hw_4.sched"),
                     *images, "--augment", "flip,transpose")
        check(close(got, want, 1e-4), f"images, H=2 W=2: {got} against one process's {want}")

        # A data set the augmentations leave as it is trains exactly as without them.
        sym, _ = symmetric(rng, 8, 2, 16)
        _, key8 = symmetric(rng, 1, 1, 8)
        labels = (np.sin(key8 @ np.array([1.3, -0.7, 0.4])) > 0).astype(np.int32)
        np.save(path("sym.npy"), sym)
        np.save(path("sym_y.npy"), np.stack([labels] * 8))
        sym_data = ("--data", "x=" + path("sym.npy"), "--data", "y=" + path("sym_y.npy"))
        for sched in ("", os.path.join(ROOT, "samples", "volume_tiny_dhw_8.sched")):
            with_aug = losses(args, folder, "sym aug " + os.path.basename(sched), VOLUME, sched, *sym_data, "--augment", "flip,transpose")
            without = losses(args, folder, "sym plain " + os.path.basename(sched), VOLUME, sched, *sym_data)
            check(with_aug is not None and with_aug == without,
                  f"a symmetric data set{' under 2x2x2' if sched else ''}: {with_aug} equal to {without}")
    return finish("augment")


if __name__ == "__main__":
    raise SystemExit(main())
