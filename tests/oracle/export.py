#!/usr/bin/python3
"""`dsl export` and `dsl predict` against PyTorch: trained weights that load into the same network there, and
predictions that PyTorch's forward in eval mode repeats in float64.

    /usr/bin/python3 tests/oracle/export.py --dsl build/cli/dsl export             # the export cases
    /usr/bin/python3 tests/oracle/export.py --dsl build/cli/dsl predict            # the predict cases
    /usr/bin/python3 tests/oracle/export.py --net N.net --checkpoint CK --inputs X.npy --prediction P.npy [--layer L]

export: for each network, `dsl run NET --steps K --save CK` (synthetic data), then `dsl export NET --load CK -o
model.pt` and `-o model.npz`. torch.load (and torch.load(weights_only=True)) must give an OrderedDict of
contiguous CPU tensors with the keys of the module that bench/pytorch_mesh.py builds for NET, in its
state_dict's order, which load_state_dict(strict=True) takes; every parameter and running statistic must
equal the checkpoint's .npy file bitwise (float32), num_batches_tracked the checkpoint's step, and the .npz the
.pt array by array. Optimizer state is not exported.

predict: the same training, then `dsl predict NET [SCHED] --load CK --data NAME=FILE... --output P.npy` on
random samples, on one process and under a schedule of 2 or 4 (2x2 grids, a hybrid, slabs of depth): each
prediction must equal the PyTorch module in eval mode (running statistics, dropout off), in float64, with the
exported weights, on the same inputs, within 1e-4 of the output's largest magnitude (dsl computes in float32),
and the distributed prediction must equal the 1-process one within 1e-5 of it (the CPU kernels round a tile's
sums as they split them). Volumes (3-D networks) and periodic padding are among the cases.

The third form checks one prediction file made elsewhere against the module with a checkpoint's weights.

Every case runs: one whose network or schedule dsl rejects fails.

Exit status: 0 when every case that ran matched, 1 when one did not (or dsl failed), 77 when this Python cannot
import torch and numpy (/usr/bin/python3 has them), 2 on usage.
"""

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, HERE)
import pytorch_mesh  # noqa: E402  (the .net translator, shared with the benchmarks)
from oracle import Failure, SKIP, checkpoint_folder, read_checkpoint, run_dsl  # noqa: E402

PREDICT_RTOL = 1e-4   # dsl (float32) against PyTorch (float64), relative to the output's largest magnitude
SPLIT_RTOL = 1e-5     # dsl on 4 processes against dsl on one
STATE = (".weight", ".bias", ".running_mean", ".running_var")
OPTIMIZER_STATE = (".momentum", ".exp_avg", ".exp_avg_sq")


class Case:
    def __init__(self, name, net, steps=2, batch=2, scheds=(), samples=8, covers=""):
        self.name, self.net, self.steps, self.batch = name, net, steps, batch
        self.scheds, self.samples, self.covers = scheds, samples, covers


EXPORT_CASES = [
    Case("mesh_tiny", "samples/mesh_tiny.net", covers="conv, batchnorm, sgd momentum left out"),
    Case("resnet_tiny", "samples/resnet_tiny.net", covers="conv without bias, batchnorm, fc, add"),
    Case("regression_tiny", "samples/regression_tiny.net", covers="groupnorm, upsample, adam's moments left out"),
    Case("classifier", "tests/oracle/classifier.net", covers="batchnorm after fc (BatchNorm1d)"),
    Case("deconv", "tests/dist/deconv.net", covers="deconv (ConvTranspose2d's [in, out, kh, kw])"),
    Case("modern", "tests/dist/modern.net", covers="groupnorm, dropout, fc, two labels"),
    Case("unet", "tests/dist/unet.net", covers="deconv, batchnorm, concat"),
    Case("volume", "tests/oracle/volume.net",
         covers="3-D: Conv3d, BatchNorm3d, ConvTranspose3d's [in, out, kd, kh, kw] (also [1, 1, 2])"),
    Case("volume_decoder", "tests/oracle/volume_decoder.net",
         covers="3-D: groupnorm, trilinear upsample, adam's moments left out"),
    Case("volume_classifier", "tests/oracle/volume_classifier.net", covers="3-D: fc of a flattened volume"),
    Case("periodic", "tests/oracle/periodic.net",
         covers="padding = periodic: circular Conv3d (a zero-padded one's keys), periodic pooling"),
    Case("periodic2d", "tests/oracle/periodic2d.net", covers="padding = periodic: circular Conv2d"),
]

PREDICT_CASES = [
    Case("mesh_tiny", "samples/mesh_tiny.net", steps=3, scheds=("samples/mesh_tiny_spatial_hw_4.sched",),
         covers="conv, batchnorm's running statistics; 2x2 grid"),
    Case("regression_tiny", "samples/regression_tiny.net", steps=3,
         scheds=("samples/regression_tiny_hybrid_4.sched",), covers="groupnorm, upsample; hybrid"),
    Case("deconv", "tests/dist/deconv.net", steps=2, scheds=("tests/dist/deconv_hw4.sched",),
         covers="deconv's halos; 2x2 grid"),
    Case("modern", "tests/dist/modern.net", steps=2, scheds=("tests/dist/modern_hw4.sched",),
         covers="dropout off, groupnorm (also on a vector), tanh, gelu; 2x2 grid"),
    Case("volume", "tests/oracle/volume.net", steps=2, scheds=("tests/oracle/volume_dh4.sched",),
         covers="3-D: batch norm's running statistics, deconv's and nearest upsampling's halos; depth x rows"),
    Case("volume_decoder", "tests/oracle/volume_decoder.net", steps=2, scheds=("tests/oracle/volume_decoder_d2.sched",),
         covers="3-D: groupnorm, trilinear upsampling's halos; depth"),
    Case("periodic", "tests/oracle/periodic.net", steps=2, scheds=("tests/oracle/periodic_dw4.sched",),
         covers="3-D padding = periodic: halos across the border; depth x columns"),
    Case("periodic2d", "tests/oracle/periodic2d.net", steps=2, scheds=("tests/oracle/periodic2d_hw4.sched",),
         covers="2-D padding = periodic: halos across the border and corners; 2x2 grid"),
]


def train_and_export(dsl, case, folder, seed):
    """The checkpoint of a few steps on synthetic data, and its export as .pt and .npz."""
    net_path = os.path.join(ROOT, case.net)
    ck = os.path.join(folder, "ck")
    run_dsl(dsl, ["run", net_path, "--steps", str(case.steps), "--batch", str(case.batch), "--seed", str(seed),
                  "--save", ck], "dsl run --save")
    pt, npz = os.path.join(folder, "model.pt"), os.path.join(folder, "model.npz")
    run_dsl(dsl, ["export", net_path, "--load", ck, "-o", pt], "dsl export")
    run_dsl(dsl, ["export", net_path, "--load", ck, "-o", npz], "dsl export (npz)")
    return net_path, ck, pt, npz


def load_pt(torch, path):
    """torch.load of the file; where this torch has weights_only, the restricted unpickler must read it too."""
    state = torch.load(path)
    try:
        restricted = torch.load(path, weights_only=True)
    except TypeError:  # a torch before weights_only
        restricted = state
    if list(restricted.keys()) != list(state.keys()) or any(not torch.equal(restricted[k], state[k]) for k in state):
        raise Failure(f"{path}: torch.load with weights_only=True reads other tensors")
    return state


def bits(np, a):
    """The bytes of an array, to compare float32 values bitwise (NaNs and -0.0 included)."""
    return np.ascontiguousarray(a).tobytes()


def check_export(torch, np, net_path, ck, pt, npz):
    """The differences between the exported files and the checkpoint, as lines; empty when they agree."""
    problems = []
    net = pytorch_mesh.Network(net_path)
    state = load_pt(torch, pt)
    if not isinstance(state, collections.OrderedDict):
        return [f"torch.load gives a {type(state).__name__}, not an OrderedDict"]
    model = pytorch_mesh.torch_network(net, False)
    expected = list(model.state_dict().keys())
    if list(state.keys()) != expected:
        problems.append(f"keys {list(state.keys())}, but the module's state_dict has {expected}")
    for key, t in state.items():
        if t.device.type != "cpu" or not t.is_contiguous() or t.requires_grad:
            problems.append(f"'{key}' is not a contiguous CPU tensor without requires_grad")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        return problems + [f"load_state_dict(strict=True) refuses it: {e}"]
    with open(os.path.join(checkpoint_folder(ck), "manifest.json"), encoding="utf-8") as f:
        step = json.load(f)["meta"]["step"]
    checkpoint = read_checkpoint(np, ck)
    compared = set()
    for index, layer in enumerate(net.layers):
        m = model.layer_module(layer.name)
        if m is None:
            continue
        for suffix in STATE:
            t = getattr(m, suffix[1:], None)
            if t is None:
                continue
            name = layer.name + suffix
            if name not in checkpoint:
                problems.append(f"the module has '{name}' (mods.{index}{suffix}), the checkpoint has not")
                continue
            ours = t.detach().numpy()
            if ours.dtype != np.float32 or ours.shape != checkpoint[name].shape or \
                    bits(np, ours) != bits(np, checkpoint[name]):
                problems.append(f"mods.{index}{suffix} ({ours.dtype} {list(ours.shape)}) is not the checkpoint's "
                                f"'{name}' ({list(checkpoint[name].shape)}) bit for bit")
            compared.add(name)
        count = getattr(m, "num_batches_tracked", None)
        if count is not None and (count.dtype != torch.int64 or count.dim() != 0 or int(count) != step):
            problems.append(f"mods.{index}.num_batches_tracked is {count!r}, not the checkpoint's step {step}")
    left = sorted(n for n in checkpoint if n not in compared and not n.endswith(OPTIMIZER_STATE))
    if left:
        problems.append(f"the checkpoint's {', '.join(left)} are not in the export")
    arrays = np.load(npz)
    if sorted(arrays.files) != sorted(state.keys()):
        problems.append(f"the .npz holds {sorted(arrays.files)}, the .pt {sorted(state.keys())}")
    for key in arrays.files:
        if key in state and (arrays[key].shape != tuple(state[key].shape) or
                             arrays[key].dtype != state[key].numpy().dtype or
                             bits(np, arrays[key]) != bits(np, state[key].numpy())):
            problems.append(f"the .npz's '{key}' differs from the .pt's")
    return problems


def reference_prediction(torch, np, net, state, x, layer=None):
    """The output of `layer` (default: the last layer that is not a loss) for inputs x, by the PyTorch module
    in eval mode, in float64, with the exported weights."""
    if layer is None:
        layer = [lyr.name for lyr in net.layers if lyr.op not in pytorch_mesh.LOSSES and lyr.op != "label"][-1]
    model = pytorch_mesh.torch_network(net, False)
    model.load_state_dict(state, strict=True)
    model.to(torch.float64).eval()
    inputs = [lyr.name for lyr in net.layers if lyr.op == "input"]
    if len(inputs) != 1:
        raise Failure(f"{net.path}: the check takes one input, the network has {len(inputs)}")
    with torch.no_grad():
        return model.output({inputs[0]: torch.from_numpy(x.astype(np.float64))}, layer).numpy()


def compare_prediction(np, ours, theirs, rtol, what):
    """A line saying how `ours` differs from `theirs` beyond rtol of theirs' largest magnitude, or None; and the
    error."""
    if ours.shape != theirs.shape:
        return f"{what}: shape {list(ours.shape)}, expected {list(theirs.shape)}", float("inf")
    scale = max(float(np.max(np.abs(theirs))), 1e-30)
    err = float(np.max(np.abs(ours.astype(np.float64) - theirs.astype(np.float64)))) / scale
    if not np.isfinite(err) or err > rtol:
        return f"{what}: differs by {err:.2e} of its largest magnitude (bound {rtol:.0e})", err
    return None, err


def run_predict(dsl, net_path, sched, ck, data, out):
    run_dsl(dsl, ["predict", net_path] + ([sched] if sched else []) + ["--load", ck, "--output", out] +
            [a for name, path in data.items() for a in ("--data", f"{name}={path}")], "dsl predict")


def predict_data(np, net, samples, rng, folder):
    """Random inputs and labels for every input and label layer, saved as .npy: {name: path}, and the input's
    array. dsl predict reads the labels too (they make no difference to the prediction)."""
    paths, x = {}, None
    for layer in net.layers:
        if layer.op == "input":
            a = x = rng.standard_normal((samples, *layer.shape)).astype(np.float32)
        elif layer.op == "label" and layer.attrs.get("element") == "float":
            a = rng.random((samples, *layer.shape)).astype(np.float32)
        elif layer.op == "label":
            a = rng.integers(0, net.classes[layer.name], (samples, *layer.shape)).astype(np.int64)
        else:
            continue
        paths[layer.name] = os.path.join(folder, f"{layer.name}.npy")
        np.save(paths[layer.name], a)
    return paths, x


def predict_case(torch, np, dsl, case, folder, seed):
    net_path, ck, pt, _ = train_and_export(dsl, case, folder, seed)
    net = pytorch_mesh.Network(net_path)
    data, x = predict_data(np, net, case.samples, np.random.default_rng(seed), folder)
    theirs = reference_prediction(torch, np, net, load_pt(torch, pt), x)
    problems, worst = [], 0.0
    one = os.path.join(folder, "p1.npy")
    run_predict(dsl, net_path, None, ck, data, one)
    line, err = compare_prediction(np, np.load(one), theirs, PREDICT_RTOL, "1 process against PyTorch")
    problems += [line] if line else []
    worst = max(worst, err)
    for sched in case.scheds:
        out = os.path.join(folder, f"p_{os.path.basename(sched)}.npy")
        run_predict(dsl, net_path, os.path.join(ROOT, sched), ck, data, out)
        mine = np.load(out)
        line, err = compare_prediction(np, mine, theirs, PREDICT_RTOL, f"{sched} against PyTorch")
        problems += [line] if line else []
        worst = max(worst, err)
        line, _ = compare_prediction(np, mine, np.load(one), SPLIT_RTOL, f"{sched} against 1 process")
        problems += [line] if line else []
    return problems, f"worst error against PyTorch {worst:.1e}"


def export_case(torch, np, dsl, case, folder, seed):
    net_path, ck, pt, npz = train_and_export(dsl, case, folder, seed)
    problems = check_export(torch, np, net_path, ck, pt, npz)
    size = os.path.getsize(pt)
    return problems, f"{len(torch.load(pt))} tensors, {size} bytes"


def check_file(torch, np, args):
    """The third form: one prediction file against the module with the checkpoint's weights (exported here
    with --dsl, or read from --state, a .pt file)."""
    net = pytorch_mesh.Network(args.net)
    if args.state:
        state = load_pt(torch, args.state)
    else:
        folder = tempfile.mkdtemp(prefix="dsl-export-")
        try:
            pt = os.path.join(folder, "model.pt")
            run_dsl(args.dsl, ["export", args.net, "--load", args.checkpoint, "-o", pt], "dsl export")
            state = load_pt(torch, pt)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    theirs = reference_prediction(torch, np, net, state, np.load(args.inputs), args.layer)
    line, err = compare_prediction(np, np.load(args.prediction), theirs, PREDICT_RTOL, args.prediction)
    print(line or f"{args.prediction}: equals PyTorch's eval-mode forward within {err:.1e} of its largest magnitude")
    return 1 if line else 0


def main(argv=None):
    p = argparse.ArgumentParser(description="dsl export and predict against PyTorch.")
    p.add_argument("what", nargs="?", choices=("export", "predict"), help="the cases to run")
    p.add_argument("cases", nargs="*", help="the cases' names (default all)")
    p.add_argument("--dsl", help="the dsl binary")
    p.add_argument("--seed", type=int, default=1, help="the seed of the weights and data (default 1)")
    p.add_argument("--keep", help="keep the checkpoints and files in this folder (made; must not exist)")
    p.add_argument("--net", help="instead of the cases: the network of a prediction file ...")
    p.add_argument("--checkpoint", help="... the checkpoint it was made with (exported with --dsl) ...")
    p.add_argument("--state", help="... or the .pt file exported from it ...")
    p.add_argument("--inputs", help="... the inputs (.npy) ...")
    p.add_argument("--prediction", help="... and the prediction (.npy) ...")
    p.add_argument("--layer", help="... of this layer (default: the last that is not a loss)")
    args = p.parse_args(argv)
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print(f"skipped: the export oracle needs torch and numpy for {sys.executable} ({e})")
        return SKIP
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    if args.net:
        if not (args.inputs and args.prediction and (args.state or (args.checkpoint and args.dsl))):
            p.error("--net needs --inputs, --prediction and --state (or --checkpoint with --dsl)")
        return check_file(torch, np, args)
    if not args.what or not args.dsl:
        p.error("give export or predict, and --dsl")
    table = EXPORT_CASES if args.what == "export" else PREDICT_CASES
    chosen = [c for c in table if not args.cases or c.name in args.cases]
    if not chosen:
        p.error(f"no such case; the cases are {', '.join(c.name for c in table)}")
    work = args.keep or tempfile.mkdtemp(prefix="dsl-export-")
    if args.keep:
        os.makedirs(work)
    print(f"{args.what}: dsl {args.dsl} against torch {torch.__version__}, {len(chosen)} case(s)")
    failed = []
    try:
        for case in chosen:
            t0 = time.time()
            folder = os.path.join(work, case.name)
            os.makedirs(folder)
            try:
                run = export_case if args.what == "export" else predict_case
                problems, summary = run(torch, np, args.dsl, case, folder, args.seed)
            except (Failure, pytorch_mesh.NetError) as e:
                problems, summary = [str(e)], "did not run"
            status = "FAIL" if problems else "PASS"
            print(f"{status} {case.name} ({case.net}{''.join(' ' + s for s in case.scheds)}): {summary}; "
                  f"{case.covers} ({time.time() - t0:.1f} s)")
            for line in problems[:20]:
                print(f"    {line}")
            if problems:
                failed.append(case.name)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{args.what}: {len(chosen) - len(failed)} of {len(chosen)} case(s) matched"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
