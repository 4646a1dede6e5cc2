#!/usr/bin/env python3
"""The layout of the source, held: what the developers' rules say of files and folders, checked on the tree.

- No source file passes 900 lines unless its top says why ("over 900 lines" in its first 40 lines).
- backend/src has a folder per concern and no loose source files.
- The public headers (include/dsl/...) include one another without a cycle, and none declares a type
  another header defines (a `class X;` whose definition lives in a header that includes this one).
- cli/: each header's functions are defined in the source file of its name (commands.hpp excepted: it
  declares each verb's setup, one per cmd_*.cpp), so that no command's file is a library for the others.
- No source file outside the backend's kind table (backend/src/kinds/) switches on a layer kind: what differs
  by kind is found in the kind's row, not in a `switch` of every pass.
- One driver of the stages: outside the front end, the scheduler and the tests, nothing loads a network,
  binds a schedule or makes a plan but through scheduler::Pipeline (scheduler/pipeline.hpp), so that every
  verb, calibration and the benches go through the same stages and `--dump-after` prints any of them.
- The trainer's parts own their state: each class in backend/src/train/ whose header says it is such a part
  (the tiles, the exchanges, the statistics, the optimizer, the timeline) declares its data members private,
  so that nothing but its own functions changes them.

Usage: tests/layout.py [REPOSITORY]   (default: the folder above this file's)
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
SOURCES = (".cpp", ".hpp", ".cu", ".cuh", ".h", ".py", ".sh")
SKIP = {".git", "fixtures"}
failures = []


def fail(message):
    failures.append(message)
    print("FAIL: " + message)


def source_files():
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIP and not d.startswith("build") and not d.startswith("."))
        for f in sorted(files):
            if f.endswith(SOURCES):
                yield os.path.join(folder, f)


def rel(path):
    return os.path.relpath(path, ROOT)


# Long files.
for path in source_files():
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    if len(lines) > 900 and not any("over 900 lines" in line for line in lines[:40]):
        fail(f"{rel(path)} has {len(lines)} lines and no reason at its top ('over 900 lines ...')")

# backend/src: folders only.
src = os.path.join(ROOT, "backend", "src")
loose = [f for f in sorted(os.listdir(src)) if os.path.isfile(os.path.join(src, f))]
if loose:
    fail("backend/src holds loose files (each belongs in its concern's folder): " + ", ".join(loose))

# The public headers' include graph.
INCLUDE = re.compile(r'^\s*#\s*include\s+<(dsl/[^>]+)>', re.M)
DEFINES = re.compile(r'^(?:class|struct)\s+(\w+)\b[^;]*\{', re.M)
DECLARES = re.compile(r'^(?:class|struct)\s+(\w+)\s*;', re.M)
headers = {}
for library in ("base", "frontend", "scheduler", "backend"):
    include = os.path.join(ROOT, library, "include")
    for folder, _, files in os.walk(include):
        for f in files:
            if f.endswith(".hpp"):
                path = os.path.join(folder, f)
                with open(path, encoding="utf-8") as h:
                    headers[os.path.relpath(path, include)] = h.read()
if len(headers) < 20:
    fail(f"found only {len(headers)} public headers under */include: the check reads the wrong folders")
graph = {name: [i for i in INCLUDE.findall(text) if i in headers] for name, text in headers.items()}


def reachable(start):
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


for name in sorted(headers):
    if name in reachable(name):
        fail(f"{name} includes itself through other headers")
defined_in = {}
for name, text in headers.items():
    for t in DEFINES.findall(text):
        defined_in.setdefault(t, set()).add(name)
for name, text in sorted(headers.items()):
    for t in DECLARES.findall(text):
        for home in sorted(defined_in.get(t, ())):
            if home != name and name in reachable(home) | {home}:
                fail(f"{name} declares {t}, which {home} defines and which includes {name}: a tie the includes hide")

# cli/: a header's functions in the source of its name.
cli = os.path.join(ROOT, "cli")
for f in sorted(os.listdir(cli)):
    if not f.endswith(".hpp") or f == "commands.hpp":
        continue
    if not os.path.exists(os.path.join(cli, f[:-4] + ".cpp")):
        fail(f"cli/{f} has no cli/{f[:-4]}.cpp: its functions are defined in another file")
        continue
    with open(os.path.join(cli, f), encoding="utf-8") as h:
        text = h.read()
    with open(os.path.join(cli, f[:-4] + ".cpp"), encoding="utf-8") as c:
        own = c.read()
    # Functions declared at namespace scope (a line that starts with a type and ends its declaration with ';').
    for name in re.findall(r'^[A-Za-z][\w:<>,\s\*&]*?[\s\*&](\w+)\([^;{]*\)\s*(?:const\s*)?;', text, re.M):
        if not re.search(r'\b' + name + r'\s*\(', own):
            fail(f"cli/{f} declares {name}, which cli/{f[:-4]}.cpp does not define")

# Layer kinds: one place per kind.
KIND_SWITCH = re.compile(r'\bcase\s+(?:\w+::)*OpKind::|\bswitch\s*\([^()]*(?:\.|->)op\s*\)')
kinds = os.path.join(ROOT, "backend", "src", "kinds")
if not os.path.isdir(kinds) or len(os.listdir(kinds)) < 10:
    fail("backend/src/kinds/ (the backend's kind table, a file per kind) is missing or nearly empty")
for path in source_files():
    if path.startswith(kinds + os.sep) or not path.endswith((".cpp", ".hpp", ".cu", ".cuh", ".h")):
        continue
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    m = KIND_SWITCH.search(text)
    if m:
        line = text.count("\n", 0, m.start()) + 1
        fail(f"{rel(path)}:{line} switches on a layer kind: what differs by kind belongs in its row of backend/src/kinds/")

# The stages: one driver.
STAGE_CALL = re.compile(r'\b(load_network|apply_schedule|make_plan)\s*\(')
for path in source_files():
    if not rel(path).startswith(("cli" + os.sep, "bench" + os.sep, "backend" + os.sep)):
        continue
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    for m in STAGE_CALL.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        fail(f"{rel(path)}:{line} calls {m.group(1)}: a stage runs through scheduler::Pipeline (pipeline.hpp)")

# The trainer's parts: no data member outside a `private:` section of their class.
PARTS = {"tiles.hpp": "Tiles", "exchanges.hpp": "Exchanges", "statistics.hpp": "Statistics",
         "optimizer.hpp": "Optimizer", "timeline.hpp": "Timeline"}
MEMBER = re.compile(r'^    (?!using |friend |static |struct |class |enum |template|typedef |explicit |virtual |//)'
                    r'[\w:<>,\s*&]+?[\w>]\s+\w+(\s*=\s*[^;()]+|\s*\{[^}]*\})?;', re.M)
train = os.path.join(ROOT, "backend", "src", "train")
for header, name in sorted(PARTS.items()):
    path = os.path.join(train, header)
    if not os.path.exists(path):
        fail(f"{rel(path)}: the trainer's part {name} is missing")
        continue
    with open(path, encoding="utf-8") as f:
        text = f.read()
    body = re.search(r'^class ' + name + r'\b[^;]*?\{(.*?)^\};', text, re.M | re.S)
    if not body:
        fail(f"{rel(path)}: no class {name}")
        continue
    public = re.split(r'^private:', body.group(1), flags=re.M)[0]
    for m in MEMBER.finditer(public):
        line = text[:body.start(1) + m.start()].count("\n") + 1
        fail(f"{rel(path)}:{line}: {name} declares a data member outside `private:`: {m.group(0).strip()}")

print(f"layout: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
