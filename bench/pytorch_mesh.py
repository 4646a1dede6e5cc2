#!/usr/bin/env python3
"""The PyTorch baseline for dsl's GPU backend: a .net file's network built in PyTorch and trained on synthetic data.

    python3 bench/pytorch_mesh.py bench/mesh_stack_512.net --batch 8              # one line: ms per step, memory
    python3 bench/pytorch_mesh.py stdlib/mesh1k.net --max-batch --json            # the largest batch that fits
    python3 bench/pytorch_mesh.py samples/mesh_tiny.net --steps 30 --warmup 5 --tf32
    python3 bench/pytorch_mesh.py samples/resnet_tiny.net --layers                # the translated graph (no torch)

The translator reads the .net language of docs/language.md (imports, blocks with parameters and defaults,
`repeat`, `from`, every layer kind) and builds the network dsl builds: the same layers, shapes, parameters and
defaults (batchnorm eps 1e-5 and momentum 0.1, leaky_relu slope 0.01, pooling stride = kernel), weights
initialised as dsl does (torchvision's: Kaiming normal, fan out, for convolutions; PyTorch's defaults for the
rest). An input [N, C, H, W] makes a 2-D network (Conv2d, BatchNorm2d, MaxPool2d...), an input [N, C, D, H, W]
a 3-D one (Conv3d, ConvTranspose3d, BatchNorm3d, MaxPool3d, trilinear upsampling...); `padding = periodic` is
the circular padding mode of a convolution, and F.pad(mode='circular') before a pool. It checks what it needs
to build the network and stops at the first error; `dsl check` remains the checker. `--layers` prints each
layer's shape, parameters and MACs, to compare with `dsl check`.

The timed step is what a PyTorch user writes: zero_grad, forward, the loss, backward, SGD (lr, momentum and
weight decay from the net's `train` line, else dsl's defaults 0.01, 0.9, 0), in eager mode, NCHW (NCDHW) float32,
cudnn.benchmark on, TF32 off unless --tf32 (--autocast bfloat16 or float16: forward under torch.autocast,
float16 with a GradScaler, as dsl's precision=bfloat16 and float16 are compared). The batch is made once, on the GPU, before the first step
(--host-inputs: copied from pinned host memory in every step). Each step is timed alone between two
torch.cuda.synchronize() calls; the first --warmup steps (cuDNN's algorithm search) are not counted.

One file of over 900 lines on purpose: it is copied alone to machines that have PyTorch and not dsl (a GPU
node, a colleague's laptop), so it carries its own reader of the .net language.
"""

import argparse
import contextlib
import gc
import heapq
import json
import math
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STDLIB = os.path.join(os.path.dirname(HERE), "stdlib")


class NetError(Exception):
    """An error in the .net file, or in what this translator can build: `file:line:col: error: message`."""


# ---------------------------------------------------------------------------------------------------------
# Parsing: the grammar of grammar/include/dsl/grammar/net.hpp, by recursive descent over the text.

RESERVED = {"import", "input", "label", "block", "repeat", "from", "train", "true", "false"}
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
INTEGER = re.compile(r"[0-9]+")
REAL = re.compile(r"[0-9]+(?:\.[0-9]*(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+)")
SEP = re.compile(r"(?:\s|#[^\n]*)*")


class Where:
    """A place in a source file, for messages."""

    def __init__(self, path, text, pos):
        self.path, self.text, self.pos = path, text, pos

    def __str__(self):
        line = self.text.count("\n", 0, self.pos) + 1
        col = self.pos - (self.text.rfind("\n", 0, self.pos) + 1) + 1
        return f"{self.path}:{line}:{col}"


def fail(where, message):
    raise NetError(f"{where}: error: {message}")


class Parser:
    """One .net file into plain dicts and tuples. Expressions are tuples whose first item is the kind and
    whose last is the place: ("int", 3, w), ("name", "filters", w), ("add", a, b, w), ..."""

    def __init__(self, path, text):
        self.path, self.text, self.pos = path, text, 0

    def where(self, pos=None):
        return Where(self.path, self.text, self.pos if pos is None else pos)

    def error(self, message, pos=None):
        fail(self.where(pos), message)

    def skip(self):
        self.pos = SEP.match(self.text, self.pos).end()

    def at_keyword(self, word):
        end = self.pos + len(word)
        return self.text.startswith(word, self.pos) and not NAME.match(self.text, end) and not (
            end < len(self.text) and self.text[end].isdigit())

    def keyword(self, word):
        if not self.at_keyword(word):
            return False
        self.pos += len(word)
        self.skip()
        return True

    def punct(self, ch):
        if not self.text.startswith(ch, self.pos):
            return False
        self.pos += len(ch)
        self.skip()
        return True

    def expect(self, ch, message):
        if not self.punct(ch):
            self.error(message)

    def match(self, pattern, skip=True):
        m = pattern.match(self.text, self.pos)
        if not m:
            return None
        self.pos = m.end()
        if skip:
            self.skip()
        return m.group()

    def ident(self, skip=True):
        m = NAME.match(self.text, self.pos)
        if not m or m.group() in RESERVED:
            return None
        return self.match(NAME, skip)

    # file ::= {import | tensor | train | block | stmt} end-of-file
    def file(self):
        f = {"path": self.path, "imports": [], "tensors": [], "train": None, "blocks": [], "body": []}
        self.skip()
        while self.pos < len(self.text):
            start = self.where()
            if self.keyword("import"):
                path = self.string()
                f["imports"].append((path, start))
            elif self.at_keyword("input") or self.at_keyword("label"):
                kind = "input" if self.at_keyword("input") else "label"
                self.keyword(kind)
                name = self.ident()
                if name is None:
                    self.error(f"expected a name after '{kind}'")
                shape = self.shape(name)
                element = "int"
                if kind == "label" and self.keyword("float"):
                    element = "float"
                elif kind == "label":
                    self.keyword("int")
                f["tensors"].append({"kind": kind, "name": name, "shape": shape, "element": element,
                                     "where": start})
            elif self.keyword("train"):
                if f["train"] is not None:
                    self.error("duplicate 'train'", start.pos)
                f["train"] = self.call_or_fail("expected an optimizer after 'train'")
            elif self.keyword("block"):
                f["blocks"].append(self.block(start))
            else:
                st = self.stmt()
                if st is None:
                    self.error("expected a statement")
                f["body"].append(st)
        return f

    def string(self):
        m = re.compile(r'"([^"\\\n\r]*)"').match(self.text, self.pos)
        if not m:
            self.error("expected a file name in double quotes after 'import'")
        self.pos = m.end()
        self.skip()
        return m.group(1)

    # shape ::= '[' dim {',' dim} ']'        dim ::= 'N' | integer
    def shape(self, name):
        self.expect("[", f"expected '[' and the shape of '{name}'")
        dims = []
        while True:
            if self.keyword("N"):
                dims.append("N")
            else:
                d = self.match(INTEGER)
                if d is None:
                    self.error("expected a dimension: 'N' or an integer")
                dims.append(int(d))
            if not self.punct(","):
                break
        self.expect("]", "expected ']' to close the shape")
        return dims

    # block ::= 'block' name '(' [param {',' param}] ')' '{' {stmt} '}'       param ::= name ['=' expr]
    def block(self, start):
        name = self.ident()
        if name is None:
            self.error("expected a name after 'block'")
        self.expect("(", f"expected '(' and the parameters of block '{name}'")
        params = []
        if not self.punct(")"):
            while True:
                p = self.ident()
                if p is None:
                    self.error("expected a parameter name")
                default = self.expr_or_fail() if self.punct("=") else None
                params.append((p, default))
                if not self.punct(","):
                    break
            self.expect(")", f"expected ')' to close the parameters of '{name}'")
        self.expect("{", f"expected '{{' to start the body of block '{name}'")
        body = []
        while not self.punct("}"):
            st = self.stmt()
            if st is None:
                self.error(f"expected '}}' to close the block '{name}'")
            body.append(st)
        return {"name": name, "params": params, "body": body, "where": start}

    # stmt ::= repeat [from] | (name | integer) '=' (repeat | call) [from]
    def stmt(self):
        start = self.where()
        if self.at_keyword("repeat"):
            count, first, call = self.repeat()
            return {"name": None, "call": call, "repeat": (count, first), "from": self.from_clause(), "where": start}
        name = self.ident()
        if name is None:
            name = self.match(INTEGER)
        if name is None:
            return None
        self.expect("=", f"expected '=' after the layer name '{name}'")
        if self.at_keyword("repeat"):
            count, first, call = self.repeat()
            rep = (count, first)
        else:
            call, rep = self.call_or_fail("expected a layer kind or a block after '='"), None
        return {"name": name, "call": call, "repeat": rep, "from": self.from_clause(), "where": start}

    # repeat ::= 'repeat' '(' expr [',' 'start' '=' expr] ')' call
    def repeat(self):
        self.keyword("repeat")
        self.expect("(", "expected '(' after 'repeat'")
        count, first = self.expr_or_fail(), None
        if self.punct(","):
            if not self.keyword("start"):
                self.error("expected 'start' after ','")
            self.expect("=", "expected '=' after 'start'")
            first = self.expr_or_fail()
        self.expect(")", "expected ')' to close 'repeat('")
        return count, first, self.call_or_fail("expected a block after 'repeat(...)'")

    # call ::= name ['(' [arg {',' arg}] ')']        arg ::= [name '='] expr
    def call_or_fail(self, message):
        start = self.where()
        callee = self.ident()
        if callee is None:
            self.error(message)
        args = []
        if self.punct("("):
            if not self.punct(")"):
                while True:
                    at, save = self.where(), self.pos
                    name = self.ident()
                    if name is None or not self.punct("="):
                        name, self.pos = None, save
                    args.append((name, self.expr_or_fail(), at))
                    if not self.punct(","):
                        break
                self.expect(")", f"expected ')' to close the arguments of '{callee}'")
        return {"callee": callee, "args": args, "where": start}

    # from ::= 'from' ref {',' ref}        ref ::= (name | integer) {'.' (name | integer)}, without blanks
    def from_clause(self):
        refs = []
        if not self.keyword("from"):
            return refs
        while True:
            at, path = self.where(), []
            while True:
                seg = self.ident(skip=False) or self.match(INTEGER, skip=False)
                if seg is None:
                    self.error("expected a layer name" if not path else "expected a name after '.'")
                path.append(seg)
                if not self.text.startswith(".", self.pos):
                    break
                self.pos += 1
            self.skip()
            refs.append((path, at))
            if not self.punct(","):
                break
        return refs

    # expr ::= product {('+' | '-') product}     product ::= unary {('*' | '/') unary}
    # unary ::= '-' unary | primary
    # primary ::= real | integer | 'true' | 'false' | name | list | '(' expr ')'
    def expr_or_fail(self):
        e = self.expr()
        if e is None:
            self.error("expected an expression")
        return e

    def expr(self):
        left = self.product()
        while left is not None:
            at = self.where()
            op = "add" if self.punct("+") else "sub" if self.punct("-") else None
            if op is None:
                break
            right = self.product()
            if right is None:
                self.error("expected an expression after the operator")
            left = (op, left, right, at)
        return left

    def product(self):
        left = self.unary()
        while left is not None:
            at = self.where()
            op = "mul" if self.punct("*") else "div" if self.punct("/") else None
            if op is None:
                break
            right = self.unary()
            if right is None:
                self.error("expected an expression after the operator")
            left = (op, left, right, at)
        return left

    def unary(self):
        at = self.where()
        if self.punct("-"):
            operand = self.unary()
            if operand is None:
                self.error("expected an expression after '-'")
            return ("neg", operand, at)
        return self.primary()

    def primary(self):
        at = self.where()
        real = self.match(REAL)
        if real is not None:
            return ("real", float(real), at)
        integer = self.match(INTEGER)
        if integer is not None:
            return ("int", int(integer), at)
        if self.keyword("true"):
            return ("bool", True, at)
        if self.keyword("false"):
            return ("bool", False, at)
        name = self.ident()
        if name is not None:
            if self.text.startswith("(", self.pos):  # a call as a value: `schedule = cosine(steps = 10)`
                self.pos = at.pos
                call = self.call_or_fail("expected a call")
                return ("call", call, at)
            return ("name", name, at)
        if self.punct("["):
            items = [self.expr_or_fail()]
            while self.punct(","):
                items.append(self.expr_or_fail())
            self.expect("]", "expected ']' to close the list")
            return ("list", items, at)
        if self.punct("("):
            inner = self.expr_or_fail()
            self.expect(")", "expected ')' to close the parenthesis")
            return inner
        return None


def parse_file(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise NetError(f"{path}: error: cannot read: {e.strerror}") from None
    return Parser(path, text).file()


def read_imports(main):
    """The files `main` imports, transitively, depth first, each once: relative to the importing file, then
    the folders of $DSL_STDLIB, then the source tree's stdlib/ (frontend/src/resolve_imports.cpp)."""
    done, files, open_ = set(), [], [os.path.realpath(main["path"])]

    def visit(f):
        for path, where in f["imports"]:
            dirs = [os.path.dirname(f["path"]) or "."]
            dirs += [d for d in os.environ.get("DSL_STDLIB", "").split(":") if d] + [STDLIB]
            found = next((os.path.join(d, path) for d in dirs if os.path.isfile(os.path.join(d, path))), None)
            if found is None:
                fail(where, f"cannot find imported file '{path}'")
            key = os.path.realpath(found)
            if key in open_:
                fail(where, f"import cycle through '{found}'")
            if key in done:
                continue
            open_.append(key)
            g = parse_file(found)
            visit(g)
            open_.pop()
            done.add(key)
            files.append(g)

    visit(main)
    return files


# ---------------------------------------------------------------------------------------------------------
# Elaboration: blocks and repeats expanded into named layers, inputs resolved, topologically ordered
# (frontend/src/elaborate.cpp, whose rules and layer order this follows).

KINDS = ["conv", "batchnorm", "relu", "leaky_relu", "sigmoid", "tanh", "gelu", "dropout", "groupnorm", "maxpool",
         "avgpool", "global_avgpool", "upsample", "deconv", "fc", "add", "concat", "softmax_cross_entropy",
         "pixel_cross_entropy", "mse", "l1", "bce_with_logits"]
CLASS_LOSSES = ("softmax_cross_entropy", "pixel_cross_entropy")  # integer labels
REGRESSION_LOSSES = ("mse", "l1", "bce_with_logits")              # float labels of the logits' shape
LOSSES = CLASS_LOSSES + REGRESSION_LOSSES
ELEMENTWISE = ("relu", "leaky_relu", "sigmoid", "tanh", "gelu", "dropout")

# Each kind's arguments in positional order: (name, type, default; None where required).
WEIGHT = ("weight", "positive_real", 1.0)  # a loss's factor in the total that training minimizes
PADDING = ("padding", "padding", "zeros")  # what a window reads beyond the border: zeros, or the other side
# Window arguments ("spatial") are one number for every spatial dimension, kept as a tuple of one until shape
# inference fits it to the input's rank, or a list of one per dimension ([h, w] or [d, h, w]).
PARAMS = {
    "conv": [("filters", "positive_int", None), ("kernel", "positive_spatial", (1,)),
             ("stride", "positive_spatial", (1,)), ("pad", "nonneg_spatial", (0,)),
             ("dilation", "positive_spatial", (1,)), ("bias", "bool", True), PADDING],
    "deconv": [("filters", "positive_int", None), ("kernel", "positive_spatial", (1,)),
               ("stride", "positive_spatial", (1,)), ("pad", "nonneg_spatial", (0,)),
               ("output_pad", "nonneg_spatial", (0,)), ("bias", "bool", True)],
    "batchnorm": [("eps", "positive_real", 1e-5), ("momentum", "unit_real", 0.1)],
    "groupnorm": [("groups", "positive_int", None), ("eps", "positive_real", 1e-5)],
    "leaky_relu": [("slope", "any_real", 0.01)],
    "dropout": [("p", "unit_real", None)],
    "maxpool": [("kernel", "positive_spatial", None), ("stride", "positive_spatial", None),
                ("pad", "nonneg_spatial", (0,)), PADDING],
    "avgpool": [("kernel", "positive_spatial", None), ("stride", "positive_spatial", None),
                ("pad", "nonneg_spatial", (0,)), PADDING],
    "upsample": [("scale", "positive_int", 2), ("mode", "upsample_mode", "nearest")],
    "fc": [("outputs", "positive_int", None), ("bias", "bool", True)],
}
for _loss in LOSSES:
    PARAMS[_loss] = [WEIGHT]
WORDS = {"upsample_mode": ("nearest", "bilinear", "trilinear"),  # arguments that are one of a few words
         "padding": ("zeros", "periodic")}
SPATIAL_LIST = "a list of one per spatial dimension ([height, width] or [depth, height, width])"
TYPE_TEXT = {"positive_int": "a positive integer", "positive_spatial": f"a positive integer, or {SPATIAL_LIST}",
             "nonneg_spatial": f"a non-negative integer, or {SPATIAL_LIST}", "bool": "true or false",
             "positive_real": "a positive number", "any_real": "a number", "unit_real": "a number between 0 and 1",
             "upsample_mode": "nearest, bilinear or trilinear", "padding": "zeros or periodic"}
SPATIAL_TYPES = ("positive_spatial", "nonneg_spatial")
AXES = ("planes of depth", "rows", "columns")  # the spatial dimensions' units, outermost first (a volume's)

# The optimizers of the `train` line, each with its arguments in positional order and their defaults (dsl's
# defaults where the line leaves them out), and the learning-rate schedules.
OPTIMIZERS = {
    "sgd": [("lr", 0.01), ("momentum", 0.9), ("weight_decay", 0.0)],
    "adam": [("lr", 0.001), ("beta1", 0.9), ("beta2", 0.999), ("eps", 1e-8), ("weight_decay", 0.0)],
    "adamw": [("lr", 0.001), ("beta1", 0.9), ("beta2", 0.999), ("eps", 1e-8), ("weight_decay", 0.01)],
}
SCHEDULES = {"cosine": [("steps", None)], "step": [("every", None), ("gamma", 0.1)]}


def is_int(v):
    return type(v) is int  # a bool is an int to Python, never to the language


def is_number(v):
    return type(v) in (int, float)


def evaluate(e, env):
    kind, where = e[0], e[-1]
    if kind in ("int", "real", "bool"):
        return e[1]
    if kind == "name":
        if e[1] not in env:
            fail(where, f"unknown name '{e[1]}'")
        return env[e[1]]
    if kind == "list":
        return [evaluate(x, env) for x in e[1]]
    if kind == "call":
        fail(where, "a call is a value only as the 'schedule' of the 'train' line")
    if kind == "neg":
        v = evaluate(e[1], env)
        if not is_number(v):
            fail(where, "'-' needs a number")
        return -v
    a, b = evaluate(e[1], env), evaluate(e[2], env)
    if not is_number(a) or not is_number(b):
        fail(where, "arithmetic needs numbers")
    if kind == "div" and b == 0:
        fail(where, "division by zero")
    if is_int(a) and is_int(b):
        if kind == "div":
            q = abs(a) // abs(b)
            return q if (a >= 0) == (b >= 0) else -q  # truncates toward zero, as C does
        return a + b if kind == "add" else a - b if kind == "sub" else a * b
    a, b = float(a), float(b)
    return a + b if kind == "add" else a - b if kind == "sub" else a * b if kind == "mul" else a / b


def convert(value, kind):
    """The value of an argument of type `kind`, or None when it is not one."""
    if kind in WORDS:
        return value if value in WORDS[kind] else None
    if kind == "positive_int":
        return value if is_int(value) and value >= 1 else None
    if kind in SPATIAL_TYPES:
        if is_int(value):
            values = (value,)
        elif isinstance(value, list) and 2 <= len(value) <= 3 and all(is_int(x) for x in value):
            values = tuple(value)
        else:
            return None
        return values if min(values) >= (1 if kind == "positive_spatial" else 0) else None
    if kind == "bool":
        return value if type(value) is bool else None
    if not is_number(value):
        return None
    x = float(value)
    if (kind == "positive_real" and not x > 0) or (kind == "unit_real" and not 0 <= x <= 1):
        return None
    return x


class Layer:
    def __init__(self, name, op, where):
        self.name, self.op, self.where = name, op, where
        self.attrs, self.specs, self.inputs = {}, [], []
        self.shape, self.params, self.macs = [], 0, 0


class Scope:
    def __init__(self, parent, path, block, ins):
        self.parent, self.path, self.block, self.ins = parent, path, block, ins
        self.entries, self.by_name = [], {}  # entries: [name, node, child]


class Elaborator:
    def __init__(self, main, imports):
        self.blocks, self.scopes, self.nodes, self.tensors, self.net_inputs = {}, [], [], {}, []
        self.stack = []
        for f in imports + [main]:
            for b in f["blocks"]:
                if b["name"] in KINDS or b["name"] == "repeat":
                    fail(b["where"], f"block '{b['name']}' has the name of a layer kind")
                if b["name"] in self.blocks:
                    fail(b["where"], f"duplicate block '{b['name']}'")
                if not b["body"]:
                    fail(b["where"], f"block '{b['name']}' has no statements")
                self.blocks[b["name"]] = b
        self.scopes.append(Scope(-1, "", "", []))
        for t in main["tensors"]:
            self.declare(t)
        self.train = self.optimizer(main["train"])
        if not main["body"]:
            fail(Where(main["path"], "", 0), "the network has no layers")
        for st in main["body"]:
            self.statement(st, 0, {})
        for node in self.nodes:
            if node.op not in ("input", "label"):
                node.inputs = [self.resolve(s) for s in node.specs]
                self.check_inputs(node)
        self.layers = self.order()

    def declare(self, t):
        what, shape = f"{t['kind']} '{t['name']}'", t["shape"]
        if t["name"] in self.tensors:
            fail(t["where"], f"duplicate name '{t['name']}'")
        if shape[0] != "N" or "N" in shape[1:]:
            fail(t["where"], f"the first dimension of {what}, and only it, must be N")
        if any(d < 1 for d in shape[1:]):
            fail(t["where"], "dimensions must be positive")
        # Images [N, C, H, W] and volumes [N, C, D, H, W]; labels of either, or per sample.
        if t["kind"] == "input" and len(shape) not in (4, 5):
            fail(t["where"], f"{what} must be [N, C, H, W] or [N, C, D, H, W], got {len(shape)} dimensions")
        if t["kind"] == "label" and t.get("element") == "float" and len(shape) not in (2, 4, 5):
            fail(t["where"], f"float {what} must be [N, K], [N, C, H, W] or [N, C, D, H, W], got {len(shape)} "
                             "dimensions")
        if t["kind"] == "label" and t.get("element") != "float" and len(shape) not in (1, 3, 4):
            fail(t["where"], f"{what} must be [N], [N, H, W] or [N, D, H, W], got {len(shape)} dimensions")
        layer = Layer(t["name"], t["kind"], t["where"])
        layer.shape = list(shape[1:])
        layer.attrs["element"] = t.get("element", "int")
        self.tensors[t["name"]] = len(self.nodes)
        if t["kind"] == "input":
            self.net_inputs.append(len(self.nodes))
        self.nodes.append(layer)

    @staticmethod
    def optimizer(call):
        """The `train` line: {"optimizer": name, its arguments that the line sets, "warmup": K,
        "schedule": (kind, {argument: value})}; what the line leaves out is left out (dsl's defaults apply)."""
        train = {}
        if call is None:
            return train
        callee = call["callee"]
        if callee not in OPTIMIZERS:
            fail(call["where"], f"unknown optimizer '{callee}'")
        train["optimizer"] = callee
        names, positional = [n for n, _ in OPTIMIZERS[callee]], 0
        for name, value, where in call["args"]:
            if name is None:
                name = names[positional] if positional < len(names) else None
                positional += 1
            if name == "schedule":
                train["schedule"] = Elaborator.schedule(value)
                continue
            if name not in names + ["warmup"]:
                fail(where, f"'{callee}' takes {', '.join(names)}, warmup and schedule")
            x = evaluate(value, {})
            if name == "warmup":
                if not is_int(x) or x < 0:
                    fail(where, "'warmup' must be a non-negative integer")
                train["warmup"] = x
                continue
            if not is_number(x):
                fail(where, f"'{name}' must be a number")
            train[name] = float(x)
        return train

    @staticmethod
    def schedule(value):
        if value[0] != "call" or value[1]["callee"] not in SCHEDULES:
            fail(value[-1], "'schedule' must be cosine(steps = T) or step(every = K, gamma = G)")
        call = value[1]
        params = SCHEDULES[call["callee"]]
        names, given, positional = [n for n, _ in params], {}, 0
        for name, v, where in call["args"]:
            if name is None:
                name = names[positional] if positional < len(names) else None
                positional += 1
            if name not in names:
                fail(where, f"'{call['callee']}' takes {' and '.join(names)}")
            x = evaluate(v, {})
            if not is_number(x) or (name in ("steps", "every") and (not is_int(x) or x < 1)):
                fail(where, f"'{name}' must be {'a positive integer' if name != 'gamma' else 'a number'}")
            given[name] = x
        for name, default in params:
            if name not in given:
                if default is None:
                    fail(call["where"], f"missing argument '{name}' of '{call['callee']}'")
                given[name] = default
        return call["callee"], given

    def default_input(self, scope, where):
        sc = self.scopes[scope]
        if sc.entries:
            return ("prev", scope, len(sc.entries) - 1, where)
        return ("net_input" if scope == 0 else "in", scope, None, where)

    def statement(self, st, scope, env):
        specs = [("ref", scope, ref, ref[1]) for ref in st["from"]] or [self.default_input(scope, st["where"])]
        if st["repeat"] is None:
            self.call(st["call"], st["name"], st["where"], scope, specs, env)
            return
        count_e, start_e = st["repeat"]
        count = self.integer(count_e, env, 1, 100000, "the repeat count")
        start = self.integer(start_e, env, 0, 10 ** 9, "'start'") if start_e is not None else 0
        if st["name"] is not None:
            # A named repeat is a group scope whose statements are the instances 0, 1, ...
            entry = self.add_entry(scope, st["name"], st["where"])
            group = self.new_scope(scope, st["name"], "", specs)
            entry[2] = group
            for i in range(count):
                self.call(st["call"], str(start + i), st["where"], group, [self.default_input(group, st["where"])], env)
            return
        for i in range(count):
            ins = specs if i == 0 else [self.default_input(scope, st["where"])]
            self.call(st["call"], str(start + i), st["where"], scope, ins, env)

    @staticmethod
    def integer(e, env, lo, hi, what):
        v = evaluate(e, env)
        if not is_int(v) or not lo <= v <= hi:
            fail(e[-1], f"{what} must be an integer between {lo} and {hi}")
        return v

    def add_entry(self, scope, name, where):
        sc = self.scopes[scope]
        if name == "in":
            fail(where, "'in' is the input of a block and cannot name a statement")
        if name in sc.by_name or (scope == 0 and name in self.tensors):
            fail(where, f"duplicate name '{name}'")
        sc.by_name[name] = len(sc.entries)
        sc.entries.append([name, -1, -1])
        return sc.entries[-1]

    def new_scope(self, parent, name, block, ins):
        path = self.scopes[parent].path
        self.scopes.append(Scope(parent, f"{path}.{name}" if path else name, block, ins))
        return len(self.scopes) - 1

    def call(self, c, name, where, scope, specs, env):
        entry = self.add_entry(scope, name, where)
        callee = c["callee"]
        if callee in KINDS:
            path = self.scopes[scope].path
            layer = Layer(f"{path}.{name}" if path else name, callee, where)
            self.layer_args(c, layer, env)
            layer.specs = specs
            entry[1] = len(self.nodes)
            self.nodes.append(layer)
            return
        block = self.blocks.get(callee)
        if block is None:
            fail(c["where"], f"unknown layer kind or block '{callee}'")
        if callee in self.stack:
            fail(c["where"], f"block '{callee}' instantiates itself")
        if len(specs) != 1:
            fail(where, f"an instance of block '{callee}' takes 1 input, got {len(specs)}")
        bound = self.bind(c, block, env)
        child = self.new_scope(scope, name, callee, specs)
        entry[2] = child
        self.stack.append(callee)
        for st in block["body"]:
            self.statement(st, child, bound)
        self.stack.pop()

    @staticmethod
    def bind(c, block, env):
        """Positional arguments, then named ones, then defaults (which may use the parameters before them)."""
        names, bound = [p for p, _ in block["params"]], {}
        positional = 0
        for name, value, where in c["args"]:
            if name is None:
                if positional >= len(names):
                    fail(where, f"too many positional arguments: block '{block['name']}' takes {len(names)}")
                name, positional = names[positional], positional + 1
            elif name not in names:
                fail(where, f"block '{block['name']}' has no parameter '{name}'")
            if name in bound:
                fail(where, f"duplicate argument '{name}'")
            bound[name] = evaluate(value, env)
        for p, default in block["params"]:
            if p in bound:
                continue
            if default is None:
                fail(c["where"], f"missing argument '{p}' of block '{block['name']}'")
            bound[p] = evaluate(default, dict(bound))
        return bound

    @staticmethod
    def layer_args(c, layer, env):
        params = PARAMS.get(layer.op, [])
        names = [p[0] for p in params]
        given, positional = {}, 0
        for name, value, where in c["args"]:
            if name is None:
                if positional >= len(params):
                    fail(where, f"'{layer.op}' takes {len(params) or 'no'} positional arguments")
                name, positional = names[positional], positional + 1
            elif name not in names:
                fail(where, f"'{layer.op}' has no parameter '{name}'")
            if name in given:
                fail(where, f"duplicate argument '{name}'")
            kind = params[names.index(name)][1]
            word = kind in WORDS and value[0] == "name" and value[1] not in env
            v = convert(value[1] if word else evaluate(value, env), kind)
            if v is None:
                fail(value[-1], f"'{name}' must be {TYPE_TEXT[kind]}")
            given[name] = v
        for name, _, default in params:
            if name not in given and default is None and not (name == "stride" and layer.op in ("maxpool", "avgpool")):
                fail(c["where"], f"missing argument '{name}' of '{layer.op}'")
            layer.attrs[name] = given.get(name, default)
        if layer.op in ("maxpool", "avgpool") and "stride" not in given:
            layer.attrs["stride"] = layer.attrs["kernel"]

    def output_of(self, entry):
        if entry[1] >= 0:
            return entry[1]
        sc = self.scopes[entry[2]]
        return self.output_of(sc.entries[-1]) if sc.entries else -1

    def resolve_in(self, scope):
        return self.resolve(self.scopes[scope].ins[0])

    def resolve(self, spec):
        kind, scope, what, where = spec
        if kind == "prev":
            return self.output_of(self.scopes[scope].entries[what])
        if kind == "in":
            return self.resolve_in(scope)
        if kind == "net_input":
            if len(self.net_inputs) != 1:
                fail(where, "the first layer needs exactly one declared input, or one named with 'from'")
            return self.net_inputs[0]
        path, text = what[0], ".".join(what[0])
        sc = self.scopes[scope]
        head = path[0]
        if head in sc.by_name:
            entry = sc.entries[sc.by_name[head]]
        elif (head == "in" and scope > 0) or head in self.tensors:
            if len(path) > 1:
                fail(where, f"'{head}' is not an instance and has no member '{path[1]}'")
            return self.resolve_in(scope) if head == "in" else self.tensors[head]
        else:
            fail(where, f"unknown layer '{text}'")
        for i, seg in enumerate(path[1:], 1):
            if entry[2] < 0:
                fail(where, f"'{'.'.join(path[:i])}' is a layer, not an instance, and has no member '{seg}'")
            child = self.scopes[entry[2]]
            if seg not in child.by_name:
                fail(where, f"unknown layer '{text}'")
            entry = child.entries[child.by_name[seg]]
        return self.output_of(entry)

    def check_inputs(self, node):
        count = len(node.inputs)
        if node.op in ("add", "concat"):
            if count < 2:
                fail(node.where, f"'{node.op}' needs at least 2 inputs, got {count}")
        elif node.op in LOSSES:
            if count != 2:
                fail(node.where, f"'{node.op}' takes 2 inputs (logits and labels), got {count}")
        elif count != 1:
            fail(node.where, f"'{node.op}' takes 1 input, got {count}")
        for i, j in enumerate(node.inputs):
            src = self.nodes[j]
            if src.op in LOSSES:
                fail(node.where, f"loss '{src.name}' cannot be the input of another layer")
            if (src.op == "label") != (node.op in LOSSES and i == 1):
                fail(node.where, f"a label is the second input of a loss, and only that: '{src.name}' of '{node.name}'")

    def order(self):
        """Topological order, stable: among the layers that are ready, the earliest made comes first."""
        users, pending = [[] for _ in self.nodes], [len(n.inputs) for n in self.nodes]
        for i, n in enumerate(self.nodes):
            for j in n.inputs:
                users[j].append(i)
        ready = [i for i, p in enumerate(pending) if p == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for u in users[i]:
                pending[u] -= 1
                if pending[u] == 0:
                    heapq.heappush(ready, u)
        if len(order) != len(self.nodes):
            cyclic = next(n for n, p in zip(self.nodes, pending) if p > 0)
            fail(cyclic.where, f"layers form a cycle through '{cyclic.name}'")
        position = {old: new for new, old in enumerate(order)}
        layers = [self.nodes[i] for i in order]
        for layer in layers:
            layer.inputs = [position[j] for j in layer.inputs]
        return layers


def shape_text(shape):
    return "[" + ", ".join(["N"] + [str(d) for d in shape]) + "]"


def spatial_rank(layer, src):
    """The spatial rank of a windowed kind's input: 2 for an image [N, C, H, W], 3 for a volume [N, C, D, H, W]."""
    if len(src.shape) not in (3, 4):
        fail(layer.where, f"'{layer.op}' needs an image [N, C, H, W] or a volume [N, C, D, H, W], got "
                          f"{shape_text(src.shape)} from '{src.name}'")
    return len(src.shape) - 1


def fit_spatial(layer, rank):
    """The layer's window arguments fitted to `rank` spatial dimensions: one number applies to each, a list must
    have one per dimension."""
    for name, kind, _ in PARAMS.get(layer.op, []):
        value = layer.attrs.get(name)
        if kind not in SPATIAL_TYPES or value is None:
            continue
        if len(value) == 1:
            layer.attrs[name] = value * rank
        elif len(value) != rank:
            fail(layer.where, f"'{name}' of '{layer.op}' has {len(value)} values, but its input has {rank} spatial "
                              "dimensions: give one number, or one per dimension")


def infer_shapes(layers):
    """Each layer's output shape per sample (without N), parameters and MACs (frontend/src/infer_shapes.cpp)."""
    for layer in layers:
        if layer.op in ("input", "label"):
            continue
        a = layer.attrs
        src = layers[layer.inputs[0]]
        inp = src.shape
        elements = math.prod(inp)
        if layer.op in ("conv", "maxpool", "avgpool"):
            rank = spatial_rank(layer, src)
            fit_spatial(layer, rank)
            if layer.op != "conv" and any(2 * p > k for p, k in zip(a["pad"], a["kernel"])):
                fail(layer.where, f"the padding of '{layer.op}' must be at most half its kernel")
            dilation = a.get("dilation", (1,) * rank)
            out = []
            for d in range(rank):
                what = AXES[3 - rank + d]
                padded, reach = inp[d + 1] + 2 * a["pad"][d], dilation[d] * (a["kernel"][d] - 1) + 1
                if reach > padded:
                    fail(layer.where, f"kernel {a['kernel'][d]} does not fit the padded input of {padded}")
                if a["padding"] == "periodic" and a["pad"][d] > inp[d + 1]:
                    fail(layer.where, f"the periodic padding of '{layer.op}' ({a['pad'][d]} {what}) is more than its "
                                      f"input's {inp[d + 1]} {what}: it would wrap around more than once")
                out.append((padded - reach) // a["stride"][d] + 1)
            if layer.op == "conv":
                weights = a["filters"] * inp[0] * math.prod(a["kernel"])
                layer.shape = [a["filters"]] + out
                layer.params = weights + (a["filters"] if a["bias"] else 0)
                layer.macs = math.prod(out) * weights
            else:
                layer.shape = [inp[0]] + out
        elif layer.op == "batchnorm":
            if not inp:
                fail(layer.where, "'batchnorm' needs an input with channels")
            layer.shape, layer.params = list(inp), 2 * inp[0]
        elif layer.op in ELEMENTWISE:
            layer.shape = list(inp)
        elif layer.op == "groupnorm":
            if len(inp) not in (1, 3, 4) or inp[0] % a["groups"]:  # nn.GroupNorm takes [N, C, *]
                fail(layer.where, f"'groupnorm' needs an input [N, C], [N, C, H, W] or [N, C, D, H, W] whose channels "
                                  f"its {a['groups']} groups divide")
            layer.shape, layer.params = list(inp), 2 * inp[0]
        elif layer.op == "upsample":
            rank = spatial_rank(layer, src)
            if (a["mode"] == "bilinear" and rank != 2) or (a["mode"] == "trilinear" and rank != 3):
                right = "bilinear" if rank == 2 else "trilinear"
                fail(layer.where, f"'{a['mode']}' interpolates {'images' if rank == 3 else 'volumes'}, but "
                                  f"'{src.name}' is {shape_text(inp)}: use mode = {right}")
            layer.shape = [inp[0]] + [size * a["scale"] for size in inp[1:]]
        elif layer.op == "deconv":
            rank = spatial_rank(layer, src)
            fit_spatial(layer, rank)
            out = []
            for d in range(rank):
                if a["output_pad"][d] >= a["stride"][d]:
                    fail(layer.where, "'output_pad' must be smaller than the stride")
                size = (inp[d + 1] - 1) * a["stride"][d] - 2 * a["pad"][d] + a["kernel"][d] + a["output_pad"][d]
                if size < 1:
                    fail(layer.where, f"the output of 'deconv' would have no {AXES[3 - rank + d]}")
                out.append(size)
            weights = a["filters"] * inp[0] * math.prod(a["kernel"])
            layer.shape = [a["filters"]] + out
            layer.params = weights + (a["filters"] if a["bias"] else 0)
            layer.macs = math.prod(inp[1:]) * weights  # every input element times its window
        elif layer.op == "global_avgpool":
            layer.shape = [inp[0]] + [1] * spatial_rank(layer, src)
        elif layer.op == "fc":
            layer.shape = [a["outputs"]]
            layer.macs = elements * a["outputs"]
            layer.params = layer.macs + (a["outputs"] if a["bias"] else 0)
        elif layer.op == "add":
            if any(layers[j].shape != inp for j in layer.inputs[1:]):
                fail(layer.where, "cannot add tensors of different shapes")
            layer.shape = list(inp)
        elif layer.op == "concat":
            others = [layers[j].shape for j in layer.inputs[1:]]
            if not inp or any(len(o) != len(inp) or o[1:] != inp[1:] for o in others):
                fail(layer.where, "cannot concatenate tensors whose shapes differ but for the channels")
            layer.shape = [inp[0] + sum(o[0] for o in others)] + inp[1:]
        elif layer.op in REGRESSION_LOSSES:
            label = layers[layer.inputs[1]]
            if label.attrs.get("element") != "float" or label.shape != inp:
                fail(layer.where, f"'{layer.op}' needs float labels of its logits' shape {shape_text(inp)}, got "
                                  f"{label.attrs.get('element')} labels {shape_text(label.shape)}")
            layer.shape = []
        elif layer.op in LOSSES:
            labels = layers[layer.inputs[1]].shape
            pixel = layer.op == "pixel_cross_entropy"
            # Per pixel or voxel: logits [N, K, spatial...]; per sample: [N, K], or global pooling's ones.
            spatial = len(inp) in (3, 4)
            ok = spatial if pixel else len(inp) == 1 or (spatial and all(d == 1 for d in inp[1:]))
            if not ok:
                want = "[N, K, H, W] or [N, K, D, H, W]" if pixel else "[N, K] or [N, K, 1, 1]"
                fail(layer.where, f"'{layer.op}' needs logits {want}, got {shape_text(inp)}")
            if labels != (inp[1:] if pixel else []):
                fail(layer.where, f"labels {shape_text(labels)} do not match logits {shape_text(inp)} of '{layer.op}'")
            layer.shape = []
    check_padding(layers)


def check_padding(layers):
    """The windows that read one tensor agree on what lies beyond its border (zeros, or its other side)."""
    first = {}
    for layer in layers:
        if "padding" not in layer.attrs:
            continue
        other = first.setdefault(layer.inputs[0], layer)
        if other.attrs["padding"] != layer.attrs["padding"]:
            fail(layer.where, f"'{layer.name}' reads '{layers[layer.inputs[0]].name}' with padding = "
                              f"{layer.attrs['padding']}, but '{other.name}' reads it with padding = "
                              f"{other.attrs['padding']}: what lies beyond a tensor's border must be the same for "
                              "every window that reads it")


class Network:
    """A .net file elaborated: `layers` in order (inputs are indices of earlier layers), `train` the sgd
    line's settings, and each label's class count (the channels of the logits its loss reads)."""

    def __init__(self, path):
        main = parse_file(path)
        e = Elaborator(main, read_imports(main))
        self.path, self.layers, self.train = path, e.layers, e.train
        infer_shapes(self.layers)
        if not any(layer.op in LOSSES for layer in self.layers):
            raise NetError(f"{path}: error: the network has no loss to train")
        self.classes = {}
        for layer in self.layers:
            if layer.op in CLASS_LOSSES:
                label = self.layers[layer.inputs[1]].name
                k = self.layers[layer.inputs[0]].shape[0]
                self.classes[label] = min(k, self.classes.get(label, k))

    def params(self):
        return sum(layer.params for layer in self.layers)

    def macs(self):
        return sum(layer.macs for layer in self.layers)

    def describe(self):
        return [{"name": layer.name, "kind": layer.op, "inputs": [self.layers[j].name for j in layer.inputs],
                 "shape": ["N"] + layer.shape, "params": layer.params,
                 "macs": layer.macs} for layer in self.layers]


# ---------------------------------------------------------------------------------------------------------
# The network in PyTorch. torch is imported only here, so that --layers and the parser run without it.

def torch_network(net, inplace_relu, dtype=None, sixteen=None):
    """`net` as a torch.nn.Module whose forward takes {input or label name: tensor} and returns the loss that
    training minimizes (the losses' weighted sum); after each forward, `terms` holds each loss, unweighted, by
    its layer's name. Parameters are made in `dtype` (default: torch's, float32); `layer_module(name)` is the
    module that holds a layer's parameters and buffers.

    `sixteen` ({layer name: (type, products, kept)}, type "bfloat16" or "float16") emulates dsl's precision=
    (the oracle's): where `kept`, the layer's output rounded to that type after forward (to the nearest, ties
    to even), which its readers see, its gradient passing through unrounded; and where `products`, a
    convolution's three passes each on its two inputs rounded (weights and the output's gradient included),
    their products summed in `dtype`, as oneDNN's bf16 kernels compute."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    sixteen = sixteen or {}

    def rounded(x, type_name):
        return x.to(getattr(torch, type_name)).to(x.dtype)

    class RoundedConv(torch.autograd.Function):
        """A convolution whose passes multiply rounded inputs: y = conv(r(x), r(w)) + b, dx = conv_input(r(dy),
        r(w)), dw = conv_weight(r(x), r(dy)), db = the sum of r(dy)."""

        @staticmethod
        def forward(ctx, x, w, b, m, type_name):
            xr, wr = rounded(x, type_name), rounded(w, type_name)
            ctx.save_for_backward(xr, wr)
            ctx.m, ctx.type_name, ctx.has_bias = m, type_name, b is not None
            f = F.conv3d if x.dim() == 5 else F.conv2d
            return f(xr, wr, b, m.stride, m.padding, m.dilation)

        @staticmethod
        def backward(ctx, dy):
            xr, wr = ctx.saved_tensors
            m, dyr = ctx.m, rounded(dy, ctx.type_name)
            grad = torch.nn.grad
            conv_input, conv_weight = ((grad.conv3d_input, grad.conv3d_weight) if xr.dim() == 5
                                       else (grad.conv2d_input, grad.conv2d_weight))
            dx = conv_input(xr.shape, wr, dyr, m.stride, m.padding, m.dilation)
            dw = conv_weight(xr, wr.shape, dyr, m.stride, m.padding, m.dilation)
            db = dyr.sum(dim=[d for d in range(dyr.dim()) if d != 1]) if ctx.has_bias else None
            return dx, dw, db, None, None

    class RoundedOutput(torch.autograd.Function):
        """x rounded in forward; the gradient passes through unchanged (dsl rounds a stored value, not a
        function of it)."""

        @staticmethod
        def forward(ctx, x, type_name):
            return rounded(x, type_name)

        @staticmethod
        def backward(ctx, dy):
            return dy, None

    consumers = [0] * len(net.layers)
    last_use = list(range(len(net.layers)))
    for i, layer in enumerate(net.layers):
        for j in layer.inputs:
            consumers[j] += 1
            last_use[j] = i
    # Ops whose backward does not read their output: a ReLU that is their only reader may overwrite it, as
    # torchvision's models do (ReLU(inplace=True) after batch norm), which saves one tensor per ReLU.
    overwritable = ("conv", "batchnorm", "add", "concat", "fc")

    class Pad(nn.Module):
        """Each side of every spatial dimension padded by `pad` (outermost first): from the tensor's other side
        (mode 'circular', which PyTorch's pools lack as a padding mode), or with zeros ('constant')."""

        def __init__(self, pad, mode):
            super().__init__()
            self.pad = tuple(p for v in reversed(pad) for p in (v, v))  # F.pad's order: the last dimension first
            self.mode = mode

        def forward(self, x):
            return F.pad(x, self.pad, mode=self.mode)

        def extra_repr(self):
            return f"pad={self.pad}, mode={self.mode}"

    def pool(layer, src):
        """maxpool or avgpool (avgpool divides by the kernel's area or volume, padding included: PyTorch's
        count_include_pad); with padding = periodic, the circular padding first, then the pool without."""
        a, rank = layer.attrs, len(layer.attrs["kernel"])
        kind = {("maxpool", 2): nn.MaxPool2d, ("maxpool", 3): nn.MaxPool3d,
                ("avgpool", 2): nn.AvgPool2d, ("avgpool", 3): nn.AvgPool3d}[layer.op, rank]
        if a["padding"] == "periodic":
            return nn.Sequential(Pad(a["pad"], "circular"), kind(a["kernel"], a["stride"], 0))
        if layer.op == "avgpool" and rank == 3 and any(e < k for e, k in zip(src.shape[1:], a["kernel"])):
            # AvgPool3d refuses an input smaller than its kernel, padded or not: the zeros first (the same sums,
            # divided by the same volume), then the pool without padding.
            return nn.Sequential(Pad(a["pad"], "constant"), kind(a["kernel"], a["stride"], 0))
        return kind(a["kernel"], a["stride"], a["pad"])

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.mods = nn.ModuleDict()
            self.inplace = [False] * len(net.layers)
            self.frees = [[] for _ in net.layers]  # the outputs to drop after each layer: nobody reads them later
            for i, j in enumerate(last_use):
                self.frees[j].append(i)
            for i, layer in enumerate(net.layers):
                a, key = layer.attrs, str(i)
                src = net.layers[layer.inputs[0]] if layer.inputs else None
                volume = len(src.shape) == 4 if src else False  # [C, D, H, W]: a 3-D network's layer
                if layer.op == "conv":
                    # padding = periodic is PyTorch's circular padding mode
                    conv = nn.Conv3d if volume else nn.Conv2d
                    m = conv(src.shape[0], a["filters"], a["kernel"], a["stride"], a["pad"], a["dilation"],
                             bias=a["bias"], padding_mode="circular" if a["padding"] == "periodic" else "zeros")
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                    self.mods[key] = m
                elif layer.op == "deconv":  # weights [C_in, C_out, kernel...]
                    deconv = nn.ConvTranspose3d if volume else nn.ConvTranspose2d
                    self.mods[key] = deconv(src.shape[0], a["filters"], a["kernel"], a["stride"], a["pad"],
                                            a["output_pad"], bias=a["bias"])
                elif layer.op == "batchnorm":
                    bn = {1: nn.BatchNorm1d, 3: nn.BatchNorm2d, 4: nn.BatchNorm3d}[len(src.shape)]
                    self.mods[key] = bn(src.shape[0], eps=a["eps"], momentum=a["momentum"])
                elif layer.op == "groupnorm":
                    self.mods[key] = nn.GroupNorm(a["groups"], src.shape[0], eps=a["eps"])
                elif layer.op == "dropout":
                    self.mods[key] = nn.Dropout(a["p"])
                elif layer.op == "upsample":
                    linear = a["mode"] in ("bilinear", "trilinear")
                    self.mods[key] = nn.Upsample(scale_factor=a["scale"], mode=a["mode"],
                                                 align_corners=False if linear else None)
                elif layer.op in ("maxpool", "avgpool"):
                    self.mods[key] = pool(layer, src)
                elif layer.op == "fc":
                    self.mods[key] = nn.Linear(math.prod(src.shape), a["outputs"], bias=a["bias"])
                elif layer.op == "relu":
                    self.inplace[i] = inplace_relu and consumers[layer.inputs[0]] == 1 and src.op in overwritable
            if dtype is not None:
                self.to(dtype)
            self.terms = {}

        def layer_module(self, name):
            i = next((i for i, layer in enumerate(net.layers) if layer.name == name), None)
            return self.mods[str(i)] if i is not None and str(i) in self.mods else None

        def apply(self, i, xs):
            """The output of layer `i`, not a loss, from its inputs' outputs `xs`."""
            layer = net.layers[i]
            op, key = layer.op, str(i)
            if op in ("conv", "deconv", "batchnorm", "groupnorm", "maxpool", "avgpool", "upsample", "dropout"):
                return self.mods[key](xs[0])
            if op == "fc":
                return self.mods[key](xs[0].flatten(1))
            if op == "relu":
                return F.relu(xs[0], inplace=self.inplace[i])
            if op == "leaky_relu":
                return F.leaky_relu(xs[0], layer.attrs["slope"])
            if op == "sigmoid":
                return torch.sigmoid(xs[0])
            if op == "tanh":
                return torch.tanh(xs[0])
            if op == "gelu":
                return F.gelu(xs[0])  # the exact erf form, PyTorch's default
            if op == "global_avgpool":
                return xs[0].mean(dim=tuple(range(2, xs[0].dim())), keepdim=True)
            if op == "add":
                y = xs[0]
                for x in xs[1:]:
                    y = y + x
                return y
            if op == "concat":
                return torch.cat(xs, 1)
            raise NetError(f"{layer.where}: error: the translator has no forward for '{op}'")

        def forward(self, tensors):
            outs, loss = {}, None
            self.terms = {}
            for i, layer in enumerate(net.layers):
                op = layer.op
                if op in ("input", "label"):
                    outs[i] = tensors[layer.name]
                    y = None
                else:
                    xs = [outs[j] for j in layer.inputs]
                    narrow = sixteen.get(layer.name)
                    if narrow and narrow[1] and op == "conv":
                        m = self.mods[str(i)]
                        if not isinstance(m, (nn.Conv2d, nn.Conv3d)) or m.padding_mode != "zeros":
                            raise NetError(f"{layer.where}: error: the emulation of 16-bit products needs a "
                                           "zero-padded convolution")
                        y = RoundedConv.apply(xs[0], m.weight, m.bias, m, narrow[0])
                    elif op not in LOSSES:
                        y = self.apply(i, xs)
                    else:  # a loss: the mean over samples (and pixels, channels); the weighted sum is trained
                        if op == "mse":
                            term = F.mse_loss(xs[0], xs[1])
                        elif op == "l1":
                            term = F.l1_loss(xs[0], xs[1])
                        elif op == "bce_with_logits":
                            term = F.binary_cross_entropy_with_logits(xs[0], xs[1])
                        else:
                            logits = xs[0] if op == "pixel_cross_entropy" else xs[0].flatten(1)
                            term = F.cross_entropy(logits, xs[1])
                        self.terms[layer.name] = term.detach()
                        weight = layer.attrs.get("weight", 1.0)
                        term = term if weight == 1.0 else weight * term
                        loss = term if loss is None else loss + term
                        y = None
                    del xs
                if y is not None:
                    outs[i] = RoundedOutput.apply(y, narrow[0]) if narrow and narrow[2] else y
                for j in self.frees[i]:
                    outs.pop(j, None)
            return loss

        def output(self, tensors, name):
            """The output of the layer `name` (not a loss) from the inputs {input name: tensor}: only the layers
            it depends on run, and no label is needed. In eval mode (model.eval()) it is inference's."""
            target = next((i for i, layer in enumerate(net.layers) if layer.name == name), None)
            if target is None or net.layers[target].op in LOSSES or net.layers[target].op == "label":
                raise NetError(f"{net.path}: error: no layer '{name}' whose output is an activation")
            needed, todo = set(), [target]
            while todo:
                i = todo.pop()
                if i not in needed:
                    needed.add(i)
                    todo.extend(net.layers[i].inputs)
            outs = {}
            for i in sorted(needed):
                layer = net.layers[i]
                outs[i] = tensors[layer.name] if layer.op == "input" else self.apply(i, [outs[j] for j in layer.inputs])
            return outs[target]

    return Net()


def optimizer_settings(train):
    """The optimizer's name and its settings: the `train` line's, else dsl's defaults."""
    name = train.get("optimizer", "sgd")
    return name, {k: train.get(k, default) for k, default in OPTIMIZERS[name]}


def make_optimizer(torch, params, train):
    """The torch.optim optimizer the `train` line names, with its settings (PyTorch's update rules: SGD with
    momentum and weight decay added to the gradient; Adam's L2 weight decay; AdamW's decoupled one)."""
    name, a = optimizer_settings(train)
    if name == "sgd":
        return torch.optim.SGD(params, lr=a["lr"], momentum=a["momentum"], weight_decay=a["weight_decay"])
    adam = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    return adam(params, lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"], weight_decay=a["weight_decay"])


def learning_rate(train, step):
    """The learning rate of step `step` (from 0): a linear warm-up over the first `warmup` steps K from lr/K
    towards lr (PyTorch's LinearLR(start_factor = 1/K, total_iters = K): lr·(1/K + (1 − 1/K)·step/K)), then the
    schedule over the steps t after the warm-up: cosine(steps = T) is lr·(1 + cos(π·min(t, T)/T))/2
    (CosineAnnealingLR to 0, staying there), step(every = K, gamma = G) is lr·G^⌊t/K⌋ (StepLR); constant
    without one."""
    lr = optimizer_settings(train)[1]["lr"]
    warmup = train.get("warmup", 0)
    if step < warmup:
        return lr * (1 / warmup + (1 - 1 / warmup) * step / warmup)
    t = step - warmup
    kind, a = train.get("schedule", (None, {}))
    if kind == "cosine":
        return lr * 0.5 * (1 + math.cos(math.pi * min(t, a["steps"]) / a["steps"]))
    if kind == "step":
        return lr * a["gamma"] ** (t // a["every"])
    return lr


def set_tf32(torch, on):
    """TF32 for cuDNN's convolutions and cuBLAS's matrix products, on or off. PyTorch 2.9 replaced the
    allow_tf32 flags by fp32_precision ("tf32" or "ieee") and warns on the old ones: use the new where it is."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    matmul = torch.backends.cuda.matmul
    if hasattr(conv, "fp32_precision") and hasattr(matmul, "fp32_precision"):
        conv.fp32_precision = matmul.fp32_precision = "tf32" if on else "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = on
        torch.backends.cuda.matmul.allow_tf32 = on


def is_oom(torch, e):
    """Whether an exception says the step did not fit in the GPU's memory (cuDNN and cuBLAS report it in
    their own words)."""
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(oom, type) and isinstance(e, oom):
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and ("out of memory" in text or "ALLOC_FAILED" in text)


class Bench:
    """Training steps of `net` in PyTorch on `device`, at any batch."""

    def __init__(self, net, args):
        import torch
        self.torch, self.net, self.args = torch, net, args
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        torch.backends.cudnn.benchmark = True
        set_tf32(torch, args.tf32)
        self.optimizer, settings = optimizer_settings(net.train)
        self.lr, self.momentum, self.weight_decay = (settings["lr"], settings.get("momentum"),
                                                     settings["weight_decay"])

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def data(self, batch):
        """Random inputs and labels of the right shapes and classes, made once (on the device, or in pinned
        host memory with --host-inputs)."""
        torch, tensors = self.torch, {}
        where = "cpu" if self.args.host_inputs else self.device
        for layer in self.net.layers:
            shape = (batch, *layer.shape)
            if layer.op == "input":
                tensors[layer.name] = torch.randn(shape, device=where)
            elif layer.op == "label" and layer.attrs.get("element") == "float":
                tensors[layer.name] = torch.rand(shape, device=where)
            elif layer.op == "label":
                classes = self.net.classes.get(layer.name, 1)
                tensors[layer.name] = torch.randint(0, classes, shape, device=where, dtype=torch.long)
        if self.args.host_inputs and self.cuda:
            tensors = {k: v.pin_memory() for k, v in tensors.items()}
        return tensors

    def run(self, batch, warmup, steps):
        """`warmup + steps` training steps at `batch`, each timed alone; the step times after the warm-up,
        every step's loss, and the peak memory. Raises what PyTorch raises when it does not fit."""
        torch, args = self.torch, self.args
        torch.manual_seed(args.seed)
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
        model = torch_network(self.net, not args.no_inplace_relu).to(self.device)
        params = sum(p.numel() for p in model.parameters())
        if params != self.net.params():
            raise RuntimeError(f"internal error: the PyTorch model has {params} parameters, "
                               f"the network {self.net.params()}")
        opt = make_optimizer(torch, model.parameters(), self.net.train)
        tensors = self.data(batch)
        # --autocast: PyTorch's mixed precision, float16's gradients with loss scaling.
        autocast = contextlib.nullcontext
        scaler = None
        if args.autocast:
            dtype = getattr(torch, args.autocast)
            autocast = lambda: torch.autocast(device_type=self.device.type, dtype=dtype)  # noqa: E731
            if args.autocast == "float16":
                amp = getattr(torch, "amp", None)
                scaler = (amp.GradScaler(self.device.type) if hasattr(amp, "GradScaler")
                          else torch.cuda.amp.GradScaler())
        model.train()
        times, losses = [], []
        for step in range(warmup + steps):
            for group in opt.param_groups:
                group["lr"] = learning_rate(self.net.train, step)
            self.sync()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            step_tensors = tensors
            if args.host_inputs:
                step_tensors = {k: v.to(self.device, non_blocking=True) for k, v in tensors.items()}
            with autocast():
                loss = model(step_tensors)
            if scaler:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            self.sync()
            times.append(time.perf_counter() - t0)
            losses.append(loss.item())
            del loss, step_tensors
        memory = {}
        if self.cuda:
            memory = {"max_memory_allocated": torch.cuda.max_memory_allocated(self.device),
                      "max_memory_reserved": torch.cuda.max_memory_reserved(self.device)}
        return times[warmup:], losses, memory, params

    def fits(self, batch):
        """Whether two training steps run at `batch` (the second holds the gradients and momentum too)."""
        torch, failed = self.torch, None
        try:
            self.run(batch, 0, 2)
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
            if batch == 1 and not is_oom(torch, e):
                raise
            failed = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        # The exception's frames held the step's tensors: release them before the next try.
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()
        print(f"  batch {batch}: {'fits' if failed is None else 'does not fit: ' + failed[:160]}", file=sys.stderr,
              flush=True)
        return failed is None

    def max_batch(self, limit):
        """The largest batch that fits: doubling from 1 until one does not, then bisection."""
        print(f"pytorch_mesh: finding the largest batch of {self.net.path} that fits", file=sys.stderr, flush=True)
        if not self.fits(1):
            raise NetError(f"{self.net.path}: not even one sample fits on {self.args.device}")
        lo, hi = 1, None
        while hi is None:
            if lo >= limit:
                return lo
            b = min(2 * lo, limit)
            if self.fits(b):
                lo = b
            else:
                hi = b
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.fits(mid) else (lo, mid)
        return lo


def device_text(torch, device):
    if device.type != "cuda":
        return f"{device.type}, torch {torch.__version__}"
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn}"


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Train a dsl .net network in PyTorch (eager, cuDNN, NCHW float32) and time its steps.",
        epilog="example: python3 bench/pytorch_mesh.py bench/mesh_stack_512.net --max-batch --json")
    p.add_argument("net", help="a .net file")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--batch", type=int, default=None, help="the mini-batch size (default 4)")
    size.add_argument("--max-batch", action="store_true",
                      help="find the largest batch that fits (doubling, then bisection) and time that")
    p.add_argument("--max-batch-limit", type=int, default=1 << 16, help="the largest batch --max-batch tries")
    p.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--tf32", action="store_true", help="let convolutions and matrix products use TF32")
    p.add_argument("--autocast", choices=["bfloat16", "float16"], default=None,
                   help="forward under torch.autocast in this type (float16 with a GradScaler)")
    p.add_argument("--host-inputs", action="store_true",
                   help="keep the batch in pinned host memory and copy it to the GPU in every step")
    p.add_argument("--no-inplace-relu", action="store_true",
                   help="never let a ReLU overwrite its input (default: where PyTorch allows it, as torchvision does)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and data (default 0)")
    p.add_argument("--device", default="cuda", help="a torch device (default cuda; cpu to check the translation)")
    p.add_argument("--json", action="store_true", help="print a JSON object on stdout (the summary line on stderr)")
    p.add_argument("--layers", action="store_true",
                   help="print the translated layers (shape per sample, parameters, MACs) and stop; needs no torch")
    args = p.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or (args.batch is not None and args.batch < 1) or args.max_batch_limit < 1:
        p.error("--steps, --batch and --max-batch-limit must be positive, --warmup not negative")

    try:
        net = Network(args.net)
    except NetError as e:
        print(e, file=sys.stderr)
        return 1
    if args.layers:
        if args.json:
            print(json.dumps({"network": args.net, "layers": net.describe(),
                              "totals": {"params": net.params(), "macs": net.macs()}}, indent=2))
        else:
            for d in net.describe():
                shape = "[" + ", ".join(str(x) for x in d["shape"]) + "]"
                print(f"{d['name']:<28} {d['kind']:<22} {shape:<22} {d['params']:>12,} {d['macs']:>16,}"
                      f"  <- {', '.join(d['inputs'])}")
            print(f"parameters {net.params():,}; MACs per sample {net.macs():,}")
        return 0

    try:
        import torch
    except ImportError:
        print("pytorch_mesh: error: PyTorch is not installed for this Python (import torch failed)", file=sys.stderr)
        return 1
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("pytorch_mesh: error: PyTorch sees no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 1

    bench, batch = Bench(net, args), args.batch
    try:
        batch = bench.max_batch(args.max_batch_limit) if args.max_batch else (args.batch or 4)
        times, losses, memory, params = bench.run(batch, args.warmup, args.steps)
    except NetError as e:
        print(e, file=sys.stderr)
        return 1
    except RuntimeError as e:
        if not is_oom(torch, e):
            raise
        print(f"pytorch_mesh: error: batch {batch} does not fit: {str(e).strip().splitlines()[0]}", file=sys.stderr)
        return 1

    median, best = statistics.median(times), min(times)
    result = {
        "network": args.net, "batch": batch, "steps": args.steps, "warmup": args.warmup,
        "median_ms": median * 1e3, "min_ms": best * 1e3, "samples_per_second": batch / median,
        "max_memory_allocated": memory.get("max_memory_allocated"),
        "max_memory_reserved": memory.get("max_memory_reserved"),
        "parameters": params, "first_loss": losses[0], "last_loss": losses[-1],
        "optimizer": bench.optimizer, "lr": bench.lr, "momentum": bench.momentum, "weight_decay": bench.weight_decay,
        "tf32": args.tf32, "autocast": args.autocast, "host_inputs": args.host_inputs, "inplace_relu": not args.no_inplace_relu,
        "device": device_text(torch, bench.device), "step_ms": [t * 1e3 for t in times],
    }
    peak = memory.get("max_memory_allocated")
    line = (f"{args.net} batch {batch}: {median * 1e3:.2f} ms/step median, {best * 1e3:.2f} min ({args.steps} steps "
            f"after {args.warmup} warm-up); {batch / median:.1f} samples/s; "
            + (f"peak {peak / 2 ** 30:.2f} GiB allocated; " if peak is not None else "")
            + f"loss {losses[0]:.4f} -> {losses[-1]:.4f}; {'TF32' if args.tf32 else 'FP32'}"
            + (f", autocast {args.autocast}" if args.autocast else "")
            + (", inputs from the host" if args.host_inputs else "") + f"; {result['device']}")
    if args.json:
        print(line, file=sys.stderr)
        print(json.dumps(result))
    else:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
