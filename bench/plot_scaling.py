#!/usr/bin/python3
"""Strong scaling as the performance model predicts it: for each stdlib network on the Lassen and DGX H100
platforms, the auto-scheduler's schedule for 1, 2, 4, ... 2048 processes at a fixed mini-batch (`dsl explain
--json` on a schedule that leaves everything open), and the predicted speedup over the fewest processes the
network fits on. Writes a PNG chart and prints the figures it plots.

    /usr/bin/python3 bench/plot_scaling.py                       # ./scaling_predicted.png
    /usr/bin/python3 bench/plot_scaling.py -o out.png --max-procs 256 --nets stdlib/mesh1k.net
    /usr/bin/python3 bench/plot_scaling.py --json figures.json   # the figures as JSON too

Needs Debian's matplotlib (python3-matplotlib) for the chart; without it, prints the figures only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

# Mini-batch per network: large enough that the smallest layers (ResNet-50's 7x7, the mesh networks' last
# blocks) still split over 2048 processes, as in the reference paper's strong-scaling runs (a fixed global
# mini-batch spread over more GPUs).
DEFAULT_BATCH = {"mesh1k": 32, "mesh2k": 32, "resnet50": 512, "unet2k": 32}


def predict(dsl, net, platform, procs, batch, tmp):
    """The step and memory of the auto-scheduler's schedule, or None where no schedule fits."""
    sched = os.path.join(tmp, "open.sched")
    with open(sched, "w") as f:
        f.write(f"procs = {procs}\nbatch = {batch}\n")
    r = subprocess.run([dsl, "explain", net, sched, "--platform", platform, "--json"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    j = json.loads(r.stdout)
    return {"step": j["seconds"]["step"], "memory": j["memory_bytes"]["total"],
            "allreduce": j.get("communication", {}).get("allreduce", "")}, None


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsl", default=os.environ.get("DSL", os.path.join(root, "build/cli/dsl")))
    ap.add_argument("-o", "--output", default="scaling_predicted.png")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--max-procs", type=int, default=2048)
    ap.add_argument("--platforms", nargs="+", default=["lassen", "dgx_h100"])
    ap.add_argument("--nets", nargs="+",
                    default=[f"stdlib/{n}.net" for n in ("mesh1k", "mesh2k", "resnet50", "unet2k")])
    args = ap.parse_args()
    if not os.access(args.dsl, os.X_OK):
        sys.exit(f"plot_scaling.py: no {args.dsl}; build first (or set DSL)")

    counts = []
    p = 1
    while p <= args.max_procs:
        counts.append(p)
        p *= 2
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        for platform in args.platforms:
            for net in args.nets:
                name = os.path.splitext(os.path.basename(net))[0]
                batch = DEFAULT_BATCH.get(name, 32)
                rows = []
                for procs in counts:
                    got, why = predict(args.dsl, os.path.join(root, net), platform, procs, batch, tmp)
                    rows.append({"procs": procs, **got} if got else {"procs": procs, "error": why})
                fits = [r for r in rows if "step" in r]
                base = fits[0] if fits else None
                for r in fits:
                    r["speedup"] = base["step"] / r["step"]
                figures[f"{platform}/{name}"] = {"platform": platform, "network": name, "batch": batch,
                                                 "baseline_procs": base["procs"] if base else None, "rows": rows}
                print(f"{platform:9} {name:9} batch {batch:4}: " + "  ".join(
                    f"{r['procs']}:{r['speedup']:.1f}x" if "speedup" in r else f"{r['procs']}:-" for r in rows),
                    flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_scaling.py: no matplotlib (apt install python3-matplotlib): figures only", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, len(args.platforms), figsize=(6 * len(args.platforms), 4.8), squeeze=False)
    for ax, platform in zip(axes[0], args.platforms):
        for key, f in figures.items():
            if f["platform"] != platform or f["baseline_procs"] is None:
                continue
            pts = [(r["procs"], r["speedup"]) for r in f["rows"] if "speedup" in r]
            line, = ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", markersize=3,
                            label=f"{f['network']} (N={f['batch']}, from {f['baseline_procs']})")
            # Ideal: speedup in proportion to the processes, from the fewest.
            ax.plot([x for x, _ in pts], [x / f["baseline_procs"] for x, _ in pts], color=line.get_color(),
                    linestyle=":", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("processes (GPUs)")
        ax.set_ylabel("predicted speedup over the fewest that fit (dotted: ideal)")
        ax.set_title(f"{platform}: predicted strong scaling")
        ax.grid(True, which="both", linewidth=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
