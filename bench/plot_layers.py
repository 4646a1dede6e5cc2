#!/usr/bin/python3
"""Each layer's predicted time against its measured time, forward and backward, as a chart.

From `dsl compare --measure --json` output (every schedule in it):

    dsl compare NET A.sched B.sched --measure --json > compare.json
    bench/plot_layers.py --compare compare.json -o layers.png

or from a run's trace and the model's, `dsl run --trace` and `dsl explain --trace` (or `dsl explain --json`):

    dsl run NET SCHED --steps 10 --trace measured.json
    dsl explain NET SCHED --trace predicted.json
    bench/plot_layers.py --trace measured.json --predicted predicted.json -o layers.png \
        --merge side_by_side.json

`--merge` also writes one trace with the run's processes and the model's track below them, to open in
Perfetto (ui.perfetto.dev) and see the two side by side. A layer's time is its kernels and its waits for
other processes (as `dsl run --profile` counts them): in a trace, per step and process, the median of the
steps after `--warmup` (2), the mean of the processes. Needs matplotlib (Debian's python3-matplotlib).
"""

import argparse
import json
import statistics
import sys
from collections import defaultdict


def trace_layers(path, warmup):
    """{(layer, phase): seconds} from a trace of `dsl run --trace` or `dsl explain --trace`, and its layer
    order (as the first step's forward meets them)."""
    with open(path) as f:
        trace = json.load(f)
    sums = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))  # pid, step, (layer, phase)
    order = []
    steps = sorted({e["args"].get("step", 0) for e in trace["traceEvents"] if e.get("ph") == "X" and "args" in e})
    counted = [s for s in steps if s > warmup] or steps[-1:]
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") not in ("compute", "wait"):
            continue
        args = e.get("args", {})
        layer = args.get("layer", "(update)")
        phase = "backward" if args.get("phase") == "update" else args.get("phase")
        if layer not in order and phase == "forward":
            order.append(layer)
        if args.get("step") in counted:
            sums[e["pid"]][args["step"]][(layer, phase)] += e["dur"] / 1e6
    if "(update)" not in order:
        order.append("(update)")
    keys = {k for steps_of in sums.values() for v in steps_of.values() for k in v}
    out = {}
    for k in keys:
        per_process = [statistics.median(v.get(k, 0.0) for v in steps_of.values()) for steps_of in sums.values()]
        out[k] = sum(per_process) / len(per_process)
    return out, order


def explain_layers(path):
    """{(layer, phase): seconds} from `dsl explain --json`, counted as the timelines count them."""
    with open(path) as f:
        j = json.load(f)
    out, order = {}, []
    for l in j["layers"]:
        s = l["seconds"]
        out[(l["name"], "forward")] = s["forward"] + s["forward_halo"] + s["forward_sync"] + s["shuffle"] / 2
        out[(l["name"], "backward")] = (s["backward_data"] + s["backward_weights"] + s["backward_halo"] +
                                        s["backward_sync"] + s["shuffle"] / 2)
        order.append(l["name"])
    out[("(update)", "backward")] = j["seconds"]["update"] + j["seconds"]["allreduce_exposed"]
    order.append("(update)")
    return out, order


def compare_schedules(path):
    """[(title, predicted, measured, order)] from `dsl compare --measure --json`."""
    with open(path) as f:
        j = json.load(f)
    out = []
    for s in j["schedules"]:
        if "measured_step_seconds" not in s:
            print(f"{s['schedule']}: not measured, left out", file=sys.stderr)
            continue
        predicted, measured, order = {}, {}, []
        for l in s["layers"]:
            order.append(l["layer"])
            for phase in ("forward", "backward"):
                predicted[(l["layer"], phase)] = l[f"predicted_{phase}_seconds"]
                measured[(l["layer"], phase)] = l.get(f"measured_{phase}_seconds", 0.0)
        order.append("(update)")
        predicted[("(update)", "backward")] = s["update"]["predicted_seconds"]
        measured[("(update)", "backward")] = s["update"].get("measured_seconds", 0.0)
        title = f"{s['schedule']} ({s['procs']} processes): step {1e3 * s['prediction']['seconds']['step']:.2f} ms " \
                f"predicted, {1e3 * s['measured_step_seconds']:.2f} ms measured"
        out.append((title, predicted, measured, order))
    return out


def merge(measured_path, predicted_path, out_path):
    """One trace: the run's processes, then the model's below them (its pids after the run's)."""
    with open(measured_path) as f:
        measured = json.load(f)
    with open(predicted_path) as f:
        predicted = json.load(f)
    shift = 1 + max((e["pid"] for e in measured["traceEvents"]), default=-1)
    events = list(measured["traceEvents"])
    for e in predicted["traceEvents"]:
        e = dict(e, pid=e["pid"] + shift)
        if e.get("name") == "process_sort_index":
            e["args"] = {"sort_index": e["pid"]}
        events.append(e)
    # The model's step starts where the run's last traced step does, on process 0.
    starts = [e["ts"] for e in measured["traceEvents"] if e.get("cat") == "step" and e["pid"] == 0]
    offset = max(starts, default=0.0)
    for e in events[len(measured["traceEvents"]):]:
        if "ts" in e:
            e["ts"] += offset
    with open(out_path, "w") as f:
        json.dump({"displayTimeUnit": "ms", "otherData": {"generator": "dsl bench/plot_layers.py --merge"},
                   "traceEvents": events}, f)


def plot(panels, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 2, figsize=(14, max(4, 0.28 * max(len(p[3]) for p in panels)) * len(panels)),
                             squeeze=False, gridspec_kw={"width_ratios": [3, 2]})
    for row, (title, predicted, measured, order) in enumerate(panels):
        bars, scatter = axes[row]
        y = range(len(order))
        h = 0.2
        for k, (phase, source, values, colour) in enumerate([
                ("forward", "predicted", predicted, "#9ecae1"), ("forward", "measured", measured, "#3182bd"),
                ("backward", "predicted", predicted, "#fdae6b"), ("backward", "measured", measured, "#e6550d")]):
            bars.barh([i + (k - 1.5) * h for i in y], [1e3 * values.get((l, phase), 0.0) for l in order], h,
                      label=f"{phase}, {source}", color=colour)
        bars.set_yticks(list(y))
        bars.set_yticklabels(order, fontsize=7)
        bars.invert_yaxis()
        bars.set_xlabel("ms per step")
        bars.set_title(title, fontsize=9)
        bars.legend(fontsize=7)
        points = [(predicted.get(k, 0.0), measured.get(k, 0.0), k[1]) for k in set(predicted) | set(measured)]
        points = [(1e3 * p, 1e3 * m, phase) for p, m, phase in points if p > 0 and m > 0]
        for phase, colour in (("forward", "#3182bd"), ("backward", "#e6550d")):
            xs = [p for p, m, ph in points if ph == phase]
            ys = [m for p, m, ph in points if ph == phase]
            scatter.scatter(xs, ys, s=12, label=phase, color=colour)
        if points:
            lo = min(min(p, m) for p, m, _ in points)
            hi = max(max(p, m) for p, m, _ in points)
            scatter.plot([lo, hi], [lo, hi], color="grey", linewidth=0.8, label="predicted = measured")
            scatter.set_xscale("log")
            scatter.set_yscale("log")
        scatter.set_xlabel("predicted ms")
        scatter.set_ylabel("measured ms")
        scatter.set_title("each layer's forward and backward", fontsize=9)
        scatter.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compare", help="output of dsl compare --measure --json")
    ap.add_argument("--trace", help="a run's trace (dsl run --trace)")
    ap.add_argument("--predicted", help="the model's: dsl explain --trace FILE, or dsl explain --json output")
    ap.add_argument("--warmup", type=int, default=2, help="steps of the run's trace not counted (default 2)")
    ap.add_argument("--merge", help="with --trace and a predicted trace: write both as one trace here")
    ap.add_argument("-o", "--output", default="layers.png", help="the chart (default layers.png)")
    a = ap.parse_args()
    panels = []
    if a.compare:
        panels += compare_schedules(a.compare)
    if a.trace:
        if not a.predicted:
            ap.error("--trace needs --predicted")
        measured, order = trace_layers(a.trace, a.warmup)
        with open(a.predicted) as f:
            is_trace = "traceEvents" in json.load(f)
        predicted, _ = trace_layers(a.predicted, 0) if is_trace else explain_layers(a.predicted)
        panels.append((f"{a.trace} against {a.predicted}", predicted, measured, order))
        if a.merge:
            if not is_trace:
                ap.error("--merge needs the predicted trace (dsl explain --trace), not --json output")
            merge(a.trace, a.predicted, a.merge)
            print(f"wrote {a.merge}")
    if not panels:
        ap.error("nothing to plot: give --compare, or --trace with --predicted")
    plot(panels, a.output)


if __name__ == "__main__":
    main()
