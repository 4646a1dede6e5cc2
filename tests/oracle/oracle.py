#!/usr/bin/python3
"""The PyTorch oracle: dsl's training against PyTorch's, in float64, layer kind by layer kind.

    /usr/bin/python3 tests/oracle/oracle.py --dsl build/cli/dsl                 # every case of CASES
    /usr/bin/python3 tests/oracle/oracle.py --dsl build/cli/dsl decoder_h2      # the cases named (or a prefix)
    /usr/bin/python3 tests/oracle/oracle.py --list                              # the cases, and what each covers
    /usr/bin/python3 tests/oracle/oracle.py --dsl build/cli/dsl --net my.net --sched my.sched --kernels cpu

For each case: random inputs and labels saved as .npy; `dsl run NET [SCHED] --steps 1 --lr 0 --save RAW` saves
the initial weights dsl makes, from which CK0 is RAW with the optimizer state, batch-norm running statistics
and step count as they start (that step moved them); `dsl run ... --load CK0 --steps K --save CK1 --log L
--kernels KERNELS` trains K
steps on the .npy data. Then the network is built in PyTorch, in float64, by the translator of
bench/pytorch_mesh.py (the same one the benchmarks use), its parameters and batch-norm running statistics
set from CK0, and trained K steps on the same samples with the same optimizer (torch.optim's: SGD with
momentum and weight decay, Adam, AdamW) and learning rates. It must give every step's loss (the sum that
training minimizes, and each loss by its name) within a relative 1e-4 (the log's learning rate, where the log
has one, within 1e-9), and, after the K steps, every parameter and running statistic of CK1 within 1e-4 of
the tensor's largest magnitude, and the optimizer's state (SGD's momentum, Adam's moments) within 1e-4 of the
largest of its kind in the layer. dsl computes in float32: what it may differ by is its
rounding, far below these bounds for these small networks.

A schedule that keeps outputs in 16 bits (the sixteen_* cases, `--sixteen`) is emulated in PyTorch: each such
output rounded as dsl rounds it, and a convolution that multiplies in 16 bits fed its inputs rounded in each
pass (pytorch_mesh.torch_network's `sixteen`), so the same bounds hold; without the rounded products, dsl's
bfloat16 convolutions differ from it by about 1e-3.

Every case runs: a network or schedule that `dsl check` rejects fails its case, with dsl's errors. A
feature dsl does not have is no case of CASES until it has it (a list of messages to pass over would hide
the regression of every feature on it).

Exit status: 0 when every case that ran matched, 1 when one did not (or dsl failed), 77 when this Python
cannot import torch and numpy (Debian's python3-torch and python3-numpy: /usr/bin/python3), 2 on usage.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import pytorch_mesh  # noqa: E402  (the .net translator, shared with the benchmarks)

SKIP = 77
LOSS_RTOL = 1e-4      # a step's loss, relative
WEIGHT_RTOL = 1e-4    # a tensor after training, relative to its largest magnitude
LR_RTOL = 1e-9        # the log's learning rate


class Case:
    """One run to compare: a network in tests/oracle/, an optional schedule there, steps, batch, kernels."""

    def __init__(self, name, net, sched=None, steps=3, batch=4, kernels="reference", covers="", sixteen=False):
        self.name, self.net, self.sched, self.steps, self.batch = name, net, sched, steps, batch
        # `sixteen`: the schedule keeps outputs in 16 bits, which PyTorch then emulates (sixteen_bits).
        self.kernels, self.covers, self.sixteen = kernels, covers, sixteen


# Each network on one process with the reference kernels, and distributed with the CPU kernels (oneDNN,
# Halide): so every kind is checked in both kernel sets, and under samples, rows, columns, a grid and hybrids.
CASES = [
    Case("classifier", "classifier.net",
         covers="conv (stride, dilation, pad, no bias), batchnorm (2-D and after fc), relu, leaky_relu, sigmoid, "
                "maxpool (pad), avgpool (pad), global_avgpool, fc, add, concat, softmax_cross_entropy, "
                "sgd with momentum and weight decay"),
    Case("classifier_n2", "classifier.net", "classifier_n2.sched", kernels="cpu", covers="2 processes: samples"),
    Case("classifier_hw4", "classifier.net", "classifier_hw4.sched", kernels="cpu",
         covers="4 processes: rows x columns, fc and the loss over the sample groups"),
    Case("segment", "segment.net",
         covers="pixel_cross_entropy (two heads on one label, summed), strided and dilated conv, pooling with "
                "pad, concat, add, batchnorm running statistics"),
    Case("segment_h2", "segment.net", "segment_h2.sched", kernels="cpu", covers="2 processes: rows, odd heights"),
    Case("segment_hybrid4", "segment.net", "segment_hybrid4.sched", kernels="cpu",
         covers="4 processes: samples x rows, mixed per layer"),
    Case("segment_cf4", "segment.net", "segment_cf4.sched", kernels="cpu",
         covers="4 processes: filters x channels (partial sums, concat and pooling on channel blocks)"),
    Case("classifier_f2", "classifier.net", "classifier_f2.sched", kernels="cpu",
         covers="2 processes: filters (batch norm per channel block, global pooling, fc)"),
    Case("resample", "resample.net",
         covers="deconv (stride 1, 2 and 3, pad, output_pad, no bias), upsample nearest and bilinear, concat skips"),
    Case("resample_h2", "resample.net", "resample_h2.sched", kernels="cpu",
         covers="2 processes: rows (upsample's and deconv's halos at odd sizes)"),
    Case("resample_hybrid4", "resample.net", "resample_hybrid4.sched", kernels="cpu",
         covers="4 processes: samples x columns, a grid and rows per layer"),
    Case("activations", "activations.net",
         covers="tanh, gelu, dropout(p = 0), groupnorm, sigmoid, pixel_cross_entropy, adamw"),
    Case("activations_hw4", "activations.net", "activations_hw4.sched", kernels="cpu",
         covers="4 processes: rows x columns; groupnorm over each sample's spatial group"),
    Case("decoder", "decoder.net", steps=4,
         covers="deconv (stride, pad, output_pad), upsample nearest and bilinear, concat skips, mse, l1 "
                "(weight 0.5), bce_with_logits (weight 2) on float labels, adam, warmup + cosine schedule"),
    Case("decoder_h2", "decoder.net", "decoder_h2.sched", steps=4, kernels="cpu",
         covers="2 processes: rows (deconv's and bilinear's halos)"),
    Case("decoder_hybrid4", "decoder.net", "decoder_hybrid4.sched", steps=4, kernels="cpu",
         covers="4 processes: samples x rows, columns at the bottom"),
    Case("regression", "regression.net", steps=5,
         covers="mse on float labels, sgd with weight decay, warmup + step schedule"),
    Case("regression_w2", "regression.net", "regression_w2.sched", steps=5, kernels="cpu",
         covers="2 processes: columns"),
    # Volumes [N, C, D, H, W] (3-D networks) and periodic padding.
    Case("volume", "volume.net", batch=2,
         covers="3-D: conv (stride 2, a [d, h, w] kernel list, no bias), batchnorm (BatchNorm3d), maxpool (pad), "
                "avgpool ([1, 1, 2]), deconv (ConvTranspose3d: stride [1, 1, 2]; stride 2, pad, output_pad), "
                "nearest upsample, concat skips, pixel_cross_entropy on [N, D, H, W] labels"),
    Case("volume_dh4", "volume.net", "volume_dh4.sched", batch=2, kernels="cpu",
         covers="4 processes: depth x rows (halos across depth)"),
    Case("volume_decoder", "volume_decoder.net", batch=2, steps=4,
         covers="3-D: groupnorm, trilinear and nearest upsample, deconv, avgpool, concat skips, tanh, gelu, mse, "
                "l1 (weight 0.5), bce_with_logits (weight 2) on a float label [N, C, D, H, W], adam with warmup"),
    Case("volume_decoder_d2", "volume_decoder.net", "volume_decoder_d2.sched", batch=2, steps=4, kernels="cpu",
         covers="2 processes: depth (trilinear's and deconv's halos, groupnorm over both slabs)"),
    Case("volume_classifier", "volume_classifier.net",
         covers="3-D: conv ([1, 2, 2] stride, dilation 2), batchnorm, sigmoid, dropout(p = 0), "
                "global_avgpool ([N, C, 1, 1, 1]), fc of a volume, softmax_cross_entropy on [N, K] and on "
                "[N, K, 1, 1, 1] (weight 0.5)"),
    Case("volume_classifier_nd4", "volume_classifier.net", "volume_classifier_nd4.sched", kernels="cpu",
         covers="4 processes: samples x depth"),
    Case("periodic", "periodic.net", batch=2,
         covers="3-D padding = periodic: conv (circular; stride 2 with dilation; a [d, h, w] kernel list), maxpool "
                "and avgpool (F.pad circular), beside a zero-padded conv"),
    Case("periodic_dw4", "periodic.net", "periodic_dw4.sched", batch=2, kernels="cpu",
         covers="4 processes: depth x columns (halos wrapping around the volume's border)"),
    Case("periodic2d", "periodic2d.net", batch=2,
         covers="2-D padding = periodic: conv (circular; stride 2 with dilation; a [h, w] kernel list), maxpool "
                "and avgpool (F.pad circular), beside a zero-padded conv"),
    Case("periodic2d_hw4", "periodic2d.net", "periodic2d_hw4.sched", batch=2, kernels="cpu",
         covers="4 processes: rows x columns (halos wrapping around the image's border, corners included)"),
    # 16 bits: PyTorch in float64 rounds what dsl rounds (the emulation of pytorch_mesh.torch_network).
    Case("sixteen_bf16", "sixteen.net", "sixteen_bf16.sched", kernels="cpu", sixteen=True,
         covers="precision=bfloat16: every output kept in bfloat16, convolutions multiplying in it (oneDNN's "
                "bf16 kernels where the CPU has AVX-512 BF16, else float32), one recomputed"),
    Case("sixteen_bf16_reference", "sixteen.net", "sixteen_bf16.sched", sixteen=True,
         covers="the same with the reference kernels (their bfloat16 convolution: rounded inputs, double sums)"),
    Case("sixteen_f16_hw4", "sixteen.net", "sixteen_f16_hw4.sched", kernels="cpu", sixteen=True,
         covers="precision=float16 on 4 processes (rows x columns: halos in 16 bits), loss scaling from 65536"),
]

class Failure(Exception):
    pass


def dsl_env():
    env = dict(os.environ)
    # dsl starts mpirun itself for a schedule of several processes; Open MPI refuses root unless told.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", NO_COLOR="1")
    return env


def run_dsl(dsl, args, what):
    p = subprocess.run([dsl] + args, capture_output=True, text=True, env=dsl_env())
    if p.returncode != 0:
        raise Failure(f"{what} failed (exit {p.returncode}): dsl {' '.join(args)}\n{p.stdout}{p.stderr}")
    return p


def make_data(np, net, case, rng, folder):
    """Inputs and labels for K steps of N samples (no sample repeats), as dsl reads them with --inputs/--labels."""
    inputs = [layer for layer in net.layers if layer.op == "input"]
    labels = [layer for layer in net.layers if layer.op == "label"]
    if len(inputs) != 1 or len(labels) != 1:
        raise Failure(f"{case.net}: the oracle needs one input and one label (dsl run --inputs/--labels)")
    samples = case.steps * case.batch
    x = rng.standard_normal((samples, *inputs[0].shape)).astype(np.float32)
    label = labels[0]
    if label.attrs.get("element") == "float":
        y = rng.random((samples, *label.shape)).astype(np.float32)  # in [0, 1): bce_with_logits' targets too
    else:
        y = rng.integers(0, net.classes[label.name], (samples, *label.shape)).astype(np.int64)
    np.save(os.path.join(folder, "x.npy"), x)
    np.save(os.path.join(folder, "y.npy"), y)
    return {inputs[0].name: x, label.name: y}


def initial_checkpoint(np, raw, ck0):
    """dsl's initial weights as a checkpoint at step 0: `raw` is what one step at learning rate 0 saved (`dsl
    run` takes no --steps 0), whose weights are the initial ones but whose optimizer state, batch-norm running
    statistics and step count that step moved. CK0 has them as they start: optimizer state 0, running mean 0
    and variance 1 (dsl's start and PyTorch's), step 0 (so that the data and the learning rates start at 0)."""
    raw = checkpoint_folder(raw)
    with open(os.path.join(raw, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    os.makedirs(ck0)
    for t in manifest["tensors"]:
        a = np.load(os.path.join(raw, t["file"]))
        if re.search(r"\.(momentum|exp_avg|exp_avg_sq|running_mean)$", t["name"]):
            a = np.zeros_like(a)
        elif t["name"].endswith(".running_var"):
            a = np.ones_like(a)
        np.save(os.path.join(ck0, t["file"]), a)
    manifest["meta"]["step"] = 0
    with open(os.path.join(ck0, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)


def checkpoint_folder(folder):
    """The checkpoint folder that `--load FOLDER` means: the one a `--save` series' `latest` names, else
    FOLDER itself (a checkpoint folder)."""
    latest = os.path.join(folder, "latest")
    if os.path.isfile(latest):
        with open(latest, encoding="utf-8") as f:
            return os.path.join(folder, f.read().strip())
    return folder


def read_checkpoint(np, folder):
    folder = checkpoint_folder(folder)
    with open(os.path.join(folder, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    return {t["name"]: np.load(os.path.join(folder, t["file"])) for t in manifest["tensors"]}


STATE_SUFFIXES = (".weight", ".bias", ".running_mean", ".running_var")


def torch_state(model, net):
    """{checkpoint name: (torch tensor, how to lay it out as dsl does)} of every parameter and running statistic."""
    out = {}
    for layer in net.layers:
        m = model.layer_module(layer.name)
        if m is None:
            continue
        for suffix in STATE_SUFFIXES:
            t = getattr(m, suffix[1:], None)
            if t is not None:
                out[layer.name + suffix] = (t, layer.op)
    return out


def to_dsl_layout(np, array, op, suffix, shape):
    """A torch tensor's values in the layout of dsl's checkpoint of shape `shape`: ConvTranspose2d keeps its
    weight as [in, out, kh, kw]; dsl may keep it as [out, in, kh, kw] (told apart by the shape where they differ)."""
    if op == "deconv" and suffix == ".weight" and tuple(array.shape) != tuple(shape):
        array = np.swapaxes(array, 0, 1)
    if tuple(array.shape) != tuple(shape):
        raise Failure(f"shape {list(shape)} in dsl's checkpoint, {list(array.shape)} in PyTorch")
    return array


def from_dsl_layout(np, array, op, suffix, shape):
    if op == "deconv" and suffix == ".weight" and tuple(array.shape) != tuple(shape):
        array = np.swapaxes(array, 0, 1)
    if tuple(array.shape) != tuple(shape):
        raise Failure(f"shape {list(array.shape)} in dsl's checkpoint, {list(shape)} in PyTorch")
    return array


def close(np, a, b, rtol):
    """The error of `a` against `b` relative to b's largest magnitude, and whether it is within rtol."""
    scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1e-30)
    err = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) / scale if b.size else 0.0
    return err, err <= rtol


def sixteen_bits(dsl, net_path, sched, case, run_output):
    """What the PyTorch network emulates of dsl's 16 bits ({layer: (type, products, kept)},
    pytorch_mesh.torch_network): each layer of precision bfloat16 or float16, as `dsl explain --json` plans it;
    products where it is a convolution that multiplies in that type, unless dsl run said those multiply in
    float32 here (a CPU without AVX-512 BF16; float16 on a CPU); kept in 16 bits unless it is recomputed."""
    # A complete schedule's precisions do not depend on the machine: a named platform's figures spare measuring
    # this one in the middle of the test.
    p = run_dsl(dsl, ["explain", net_path] + sched + ["--batch", str(case.batch), "--json", "--platform", "lassen"],
                "dsl explain --json")
    out = {}
    for layer in json.loads(p.stdout)["layers"]:
        precision = layer["precision"]
        if precision == "float32":
            continue
        float32 = f"of precision {precision} multipl" in run_output
        out[layer["name"]] = (precision, layer["kind"] == "conv" and not float32, not layer["recompute"])
    return out


def train_torch(torch, np, net, ck0, data, case, sixteen=None):
    """The K steps in PyTorch float64 from CK0's weights: each step's (loss, {name: term}, lr), the model and
    the optimizer."""
    model = pytorch_mesh.torch_network(net, False, torch.float64, sixteen)
    state = torch_state(model, net)
    missing = sorted(set(state) - set(ck0))
    if missing:
        raise Failure(f"dsl's checkpoint lacks {', '.join(missing)}")
    known = set(state) | {n + s for n in state for s in (".momentum", ".exp_avg", ".exp_avg_sq")}
    extra = sorted(n for n in ck0 if n not in known)
    if extra:
        raise Failure(f"dsl's checkpoint has tensors the PyTorch network has not: {', '.join(extra)}")
    with torch.no_grad():
        for name, (t, op) in state.items():
            suffix = next(s for s in STATE_SUFFIXES if name.endswith(s))
            value = from_dsl_layout(np, ck0[name], op, suffix, tuple(t.shape))
            t.copy_(torch.from_numpy(np.ascontiguousarray(value, dtype=np.float64)))
    opt = pytorch_mesh.make_optimizer(torch, model.parameters(), net.train)
    model.train()
    samples = next(iter(data.values())).shape[0]
    steps = []
    for k in range(case.steps):
        index = [(k * case.batch + i) % samples for i in range(case.batch)]
        batch = {}
        for name, array in data.items():
            t = torch.from_numpy(array[index])
            batch[name] = t.to(torch.float64) if t.is_floating_point() else t
        lr = pytorch_mesh.learning_rate(net.train, k)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss = model(batch)
        loss.backward()
        opt.step()
        steps.append((loss.item(), {n: v.item() for n, v in model.terms.items()}, lr))
    return model, opt, steps


def compare(torch, np, net, case, log, ck1, model, opt, steps):
    """The differences, as lines; empty when dsl and PyTorch agree. Also the worst relative errors seen."""
    problems, worst = [], {"loss": 0.0, "weights": 0.0, "state": 0.0}
    if len(log) != case.steps:
        return [f"dsl's log has {len(log)} steps, not {case.steps}"], worst
    for k, (record, (loss, terms, lr)) in enumerate(zip(log, steps)):
        err = abs(record["loss"] - loss) / max(abs(loss), 1e-30)
        worst["loss"] = max(worst["loss"], err)
        if err > LOSS_RTOL:
            problems.append(f"step {k}: loss {record['loss']!r} in dsl, {loss!r} in PyTorch (relative {err:.2e})")
        weights = {layer.name: layer.attrs.get("weight", 1.0) for layer in net.layers if layer.op in pytorch_mesh.LOSSES}
        logged = record.get("losses") or {}
        for name, term in terms.items():
            if len(terms) == 1 and weights[name] == 1.0:
                break  # the step's loss, compared above
            if name not in logged:
                if len(terms) > 1:
                    problems.append(f"step {k}: dsl's log has no loss '{name}'")
                continue
            # Each loss as logged: unweighted (as PyTorch's loss functions give it), or with its weight.
            errs = [abs(logged[name] - v) / max(abs(v), 1e-30) for v in (term, weights[name] * term)]
            worst["loss"] = max(worst["loss"], min(errs))
            if min(errs) > LOSS_RTOL:
                problems.append(f"step {k}: loss '{name}' {logged[name]!r} in dsl, {term!r} in PyTorch "
                                f"(weight {weights[name]})")
        if "lr" in record and abs(record["lr"] - lr) > LR_RTOL * max(abs(lr), 1e-30):
            problems.append(f"step {k}: learning rate {record['lr']!r} in dsl, {lr!r} in PyTorch's schedule")
    # Optimizer state is compared relative to the largest of its kind in the layer (the weights' and the
    # bias's together): a bias before batch norm has a gradient of 0 but for rounding, which float32 and
    # float64 round differently, and that noise would otherwise be the whole of the bias's momentum.
    state_scale = {}
    for name, (t, op) in torch_state(model, net).items():
        layer = name[:name.rfind(".")]
        for suffix in (".momentum", ".exp_avg", ".exp_avg_sq"):
            if name + suffix in ck1:
                key = layer + suffix
                state_scale[key] = max(state_scale.get(key, 0.0), float(np.max(np.abs(ck1[name + suffix]))))
    for name, (t, op) in torch_state(model, net).items():
        if name not in ck1:
            problems.append(f"dsl's final checkpoint lacks '{name}'")
            continue
        suffix = next(s for s in STATE_SUFFIXES if name.endswith(s))
        ours = to_dsl_layout(np, t.detach().numpy(), op, suffix, ck1[name].shape)
        err, ok = close(np, ck1[name], ours, WEIGHT_RTOL)
        worst["weights"] = max(worst["weights"], err)
        if not ok:
            problems.append(f"'{name}' after {case.steps} steps differs by {err:.2e} of its largest magnitude")
        # The optimizer's state: SGD's momentum buffer, Adam's moments (dsl's NAME.momentum, NAME.exp_avg and
        # NAME.exp_avg_sq; PyTorch's momentum_buffer, exp_avg, exp_avg_sq).
        state = opt.state.get(t, {}) if isinstance(t, torch.nn.Parameter) else {}
        for theirs, key in ((".momentum", "momentum_buffer"), (".exp_avg", "exp_avg"), (".exp_avg_sq", "exp_avg_sq")):
            buffer = state.get(key)
            if buffer is None:
                continue
            if name + theirs not in ck1:
                problems.append(f"dsl's final checkpoint lacks '{name + theirs}'")
                continue
            ours = to_dsl_layout(np, buffer.numpy(), op, suffix, ck1[name + theirs].shape)
            scale = max(state_scale[name[:name.rfind(".")] + theirs], 1e-30)
            err = float(np.max(np.abs(ck1[name + theirs].astype(np.float64) - ours))) / scale
            worst["state"] = max(worst["state"], err)
            if err > WEIGHT_RTOL:
                problems.append(f"'{name + theirs}' after {case.steps} steps differs by {err:.2e} of the largest "
                                f"'{theirs[1:]}' of its layer")
    return problems, worst


def run_case(torch, np, dsl, case, work, seed):
    """("pass" or "fail", the differences, the worst errors, PyTorch's steps). Raises Failure when it cannot run
    (dsl check rejecting the network or schedule among the reasons)."""
    net_path = os.path.join(HERE, case.net)
    sched = [os.path.join(HERE, case.sched)] if case.sched else []
    p = subprocess.run([dsl, "check", net_path] + sched + ["--batch", str(case.batch)], capture_output=True,
                       text=True, env=dsl_env())
    if p.returncode != 0:
        raise Failure(f"dsl check rejects it (exit {p.returncode}):\n{p.stderr}")
    net = pytorch_mesh.Network(net_path)
    dropout = [layer.name for layer in net.layers if layer.op == "dropout" and layer.attrs["p"] > 0]
    if dropout:
        raise Failure(f"dropout with p > 0 ({', '.join(dropout)}): its mask is dsl's own, PyTorch cannot repeat it")
    folder = os.path.join(work, case.name)
    os.makedirs(folder)
    rng = np.random.default_rng(seed)
    data = make_data(np, net, case, rng, folder)
    ck0, ck1, log_path = (os.path.join(folder, n) for n in ("ck0", "ck1", "log.jsonl"))
    common = [net_path] + sched + ["--batch", str(case.batch), "--kernels", case.kernels, "--seed", str(seed),
                                   "--inputs", os.path.join(folder, "x.npy"), "--labels", os.path.join(folder, "y.npy")]
    raw = os.path.join(folder, "ck0-raw")
    run_dsl(dsl, ["run"] + common + ["--steps", "1", "--lr", "0", "--save", raw], "dsl run --lr 0 (the initial weights)")
    initial_checkpoint(np, raw, ck0)
    trained = run_dsl(dsl, ["run"] + common + ["--steps", str(case.steps), "--load", ck0, "--save", ck1, "--log",
                                               log_path], "dsl run (training)")
    with open(log_path, encoding="utf-8") as f:
        log = [json.loads(line) for line in f if line.strip()]
    sixteen = sixteen_bits(dsl, net_path, sched, case, trained.stdout) if case.sixteen else None
    model, opt, steps = train_torch(torch, np, net, read_checkpoint(np, ck0), data, case, sixteen)
    problems, worst = compare(torch, np, net, case, log, read_checkpoint(np, ck1), model, opt, steps)
    return ("fail" if problems else "pass", problems, worst, steps)


def main(argv=None):
    p = argparse.ArgumentParser(description="dsl's training against PyTorch's in float64.")
    p.add_argument("cases", nargs="*", help="the cases to run (names, or prefixes of names); default all")
    p.add_argument("--dsl", help="the dsl binary")
    p.add_argument("--list", action="store_true", help="list the cases and what each covers")
    p.add_argument("--keep", help="keep the data, checkpoints and logs in this folder (made; must not exist)")
    p.add_argument("--seed", type=int, default=1, help="the seed of the data (default 1)")
    p.add_argument("--net", help="instead of the cases: this network (one input, one label) ...")
    p.add_argument("--sched", help="... with this schedule ...")
    p.add_argument("--steps", type=int, default=3, help="... for this many steps (default 3) ...")
    p.add_argument("--batch", type=int, default=4, help="... of this batch (default 4) ...")
    p.add_argument("--kernels", default="reference", help="... with these kernels (default reference)")
    p.add_argument("--sixteen", action="store_true", help="... emulating the schedule's 16-bit layers in PyTorch")
    args = p.parse_args(argv)
    if args.net:
        chosen = [Case("net", os.path.abspath(args.net), args.sched and os.path.abspath(args.sched), args.steps,
                       args.batch, args.kernels, sixteen=args.sixteen)]
    else:
        chosen = [c for c in CASES if not args.cases or any(c.name == n or c.name.startswith(n) for n in args.cases)]
    if args.list:
        for c in CASES:
            where = f"{c.net} {c.sched or ''}".strip()
            print(f"{c.name:<21} {where:<50} {c.steps} steps, batch {c.batch}, {c.kernels} kernels: {c.covers}")
        return 0
    if not args.dsl or not chosen:
        p.error("--dsl is required, and the cases named must exist" if not chosen else "--dsl is required")
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print(f"skipped: the PyTorch oracle needs torch and numpy for {sys.executable} ({e}): "
              "apt-get install python3-torch python3-numpy (scripts/test installs them)")
        return SKIP
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    print(f"oracle: dsl {args.dsl} against torch {torch.__version__} (float64), {len(chosen)} case(s)")
    work = args.keep or tempfile.mkdtemp(prefix="dsl-oracle-")
    if args.keep:
        os.makedirs(work)
    failed = []
    try:
        for case in chosen:
            t0 = time.time()
            try:
                result = run_case(torch, np, args.dsl, case, work, args.seed)
            except (Failure, pytorch_mesh.NetError) as e:
                result = ("fail", [str(e)], None, None)
            took = time.time() - t0
            label = f"{case.name} ({case.net}{' ' + case.sched if case.sched else ''}, {case.kernels})"
            status, problems, worst, steps = result
            if worst is not None:
                losses = ", ".join(f"{s[0]:.6f}" for s in steps)
                print(f"{status.upper()} {label}: {case.steps} steps, losses {losses}; worst relative error: "
                      f"loss {worst['loss']:.1e}, weights {worst['weights']:.1e}, optimizer state {worst['state']:.1e} "
                      f"({took:.1f} s)")
            else:
                print(f"FAIL {label}")
            for line in problems[:20]:
                print(f"    {line}")
            if status != "pass":
                failed.append(case.name)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"oracle: {len(chosen) - len(failed)} of {len(chosen)} case(s) matched PyTorch"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
