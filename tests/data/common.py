"""What the data tests share (tests/data/*.py): their checks, dsl runs and the losses of a run's log, compared
with a relative tolerance. Each test exits 77 (skipped) where /usr/bin/python3 lacks numpy or h5py."""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
failures = []


def arguments():
    """The data tests' command line: --dsl, the binary under test."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsl", required=True)
    return parser.parse_args()


@contextlib.contextmanager
def scratch(name):
    """A folder of test `name`'s own, removed after it, and a function that joins names onto it."""
    with tempfile.TemporaryDirectory(prefix=f"dsl-{name}-") as folder:
        yield folder, lambda *names: os.path.join(folder, *names)


def need(*modules):
    """Imports `modules` (numpy, h5py), or ends the test as skipped, saying which is missing."""
    try:
        return [__import__(m) for m in modules]
    except ImportError as e:
        print(f"skipped: the numpy oracle needs /usr/bin/python3 with {', '.join(modules)} ({e})")
        sys.exit(77)


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def dsl(binary, *args):
    return subprocess.run([binary, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def losses(binary, folder, name, net, sched, *extra, steps=3, batch=4):
    """The per-step losses of `dsl run NET [SCHED] ...` (a failed run is a failed check, and None)."""
    log = os.path.join(folder, os.path.basename(name).replace(" ", "_") + ".jsonl")
    r = dsl(binary, "run", net, *([sched] if sched else []), "--steps", str(steps), "--batch", str(batch), "--lr",
            "0.05", "--log", log, *extra)
    if r.returncode != 0:
        check(False, f"{name}: dsl run failed:\n{r.stderr}")
        return None
    with open(log) as f:
        return [json.loads(line)["loss"] for line in f if '"loss"' in line]


def close(a, b, tolerance):
    """Both runs' losses, each within `tolerance` of the other's, relative."""
    return a is not None and b is not None and len(a) == len(b) and all(
        abs(x - y) <= tolerance * max(abs(y), 1e-30) for x, y in zip(a, b))


def errors(binary, cases, net, *common, before_steps=True):
    """Each case (its arguments, what makes the condition, the message) is exit 1 with the message, without an
    internal error, and before any step where `before_steps`."""
    for extra, make, message in cases:
        make()
        r = dsl(binary, "run", net, *common, *extra)
        check(r.returncode == 1 and message in r.stderr and not (before_steps and "step " in r.stdout) and
              "internal error" not in r.stderr,
              f"dsl run {' '.join(extra)}: exit {r.returncode}, says '{message}'\n{r.stderr.strip()}")


def finish(name):
    print(f"{name}: {len(failures)} failure(s)")
    return 1 if failures else 0
