#!/usr/bin/env python3
"""The editors' syntax files (editors/) against the languages they colour.

The TextMate grammars (editors/vscode/syntaxes/*.tmLanguage.json, which VS Code reads) must tokenize every
line of every .net, .sched and .platform file in stdlib/ and samples/, and every whole-file example of the
README and docs/, with no character left unmatched and no `invalid` token. Every word the languages give a
meaning to must be in the syntax files of its language, TextMate's and Vim's: the keywords of grammar/, the
layer kinds, their choices, the optimizers and learning-rate schedules of frontend/, the schedule's and
the platform's settings and words of scheduler/, each list read from the source, so that a new word
without colouring fails here. Each layer kind must also tokenize as one.

With --vim: vim loads each file with the Vim syntax files (editors/vim), and no character may be in an Error
group. Where vim is not installed, or has no syntax highlighting (vim-tiny), that check cannot run: it exits 77
(ctest's skipped), saying why.

Usage: tests/editors.py [--vim] [REPOSITORY]   (default: the folder above this file's)
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

VIM_CHECK = "--vim" in sys.argv[1:]
ARGS = [a for a in sys.argv[1:] if a != "--vim"]
ROOT = os.path.abspath(ARGS[0] if ARGS else os.path.join(os.path.dirname(__file__), ".."))
SKIP = 77
LANGUAGES = {"net": "dsl-net", "sched": "dsl-sched", "platform": "dsl-platform"}
VIM = {"net": "dslnet", "sched": "dslsched", "platform": "dslplatform"}
failures = []


def fail(message):
    failures.append(message)
    print("FAIL: " + message)


def read(*path):
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return f.read()


# ----------------------------------------------------------------------------------------------------------
# A TextMate tokenizer: the rules of vscode-textmate for `match`, `begin`/`end`, `captures` and `include`
# (of the repository and $self), enough for these grammars. At each position the rule whose match starts
# first wins, the earlier in the list among equals, and a rule's `end` before its patterns.


class Grammar:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            self.json = json.load(f)
        self.scope = self.json["scopeName"]
        self.compiled = {}

    def regex(self, text):
        if text not in self.compiled:
            self.compiled[text] = re.compile(text)
        return self.compiled[text]

    def patterns(self, rule):
        """The rules that `rule`'s patterns list, includes expanded."""
        out = []
        for p in rule.get("patterns", []):
            if "include" in p:
                name = p["include"]
                target = self.json if name == "$self" else self.json["repository"][name.lstrip("#")]
                out.extend(self.patterns(target) if "match" not in target and "begin" not in target else [target])
            else:
                out.append(p)
        return out


def tokenize(grammar, lines):
    """(line number, column, text, scopes) for every token; text outside any token is given scope None."""
    stack = [grammar.json]
    tokens = []

    def captured(m, captures, scopes, number):
        for group, c in sorted(captures.items(), key=lambda kv: int(kv[0])):
            g = int(group)
            if m.group(g):
                tokens.append((number, m.start(g) + 1, m.group(g), scopes + [c["name"]]))

    for number, line in enumerate(lines, 1):
        pos = 0
        while pos < len(line):
            rule = stack[-1]
            scopes = [r["name"] for r in stack[1:] if "name" in r]
            best = None  # (start, order, match, kind, rule)
            if "end" in rule:
                m = grammar.regex(rule["end"]).search(line, pos)
                if m:
                    best = (m.start(), -1, m, "end", rule)
            for order, p in enumerate(grammar.patterns(rule)):
                m = grammar.regex(p.get("match", p.get("begin"))).search(line, pos)
                if m and (best is None or m.start() < best[0]):
                    best = (m.start(), order, m, "begin" if "begin" in p else "match", p)
            if best is None or best[2].end() == best[2].start() and best[3] != "begin":
                tokens.append((number, pos + 1, line[pos:], None))
                break
            start, _, m, kind, p = best
            if start > pos:
                tokens.append((number, pos + 1, line[pos:start], None))
            if kind == "end":
                captured(m, p.get("endCaptures", {}), scopes, number)
                stack.pop()
            elif kind == "begin":
                captured(m, p.get("beginCaptures", {}), scopes + ([p["name"]] if "name" in p else []), number)
                stack.append(p)
            else:
                if "name" in p:
                    tokens.append((number, m.start() + 1, m.group(0), scopes + [p["name"]]))
                captured(m, p.get("captures", {}), scopes + ([p["name"]] if "name" in p else []), number)
            if m.end() == pos and kind != "end":
                tokens.append((number, pos + 1, line[pos:], None))  # no progress: a grammar fault
                break
            pos = m.end()
    return tokens


def check_tokens(grammar, where, text):
    """The faults of `text`: a character in no token with a scope, or in an invalid one; and the scopes used."""
    faults = []
    covered = {}
    tokens = tokenize(grammar, text.split("\n"))
    for number, column, token, scopes in tokens:
        if scopes is None and token.strip():
            faults.append(f"{where}:{number}:{column}: '{token.strip()[:30]}' is in no token of {grammar.scope}")
        elif scopes and any(s.startswith("invalid") for s in scopes):
            faults.append(f"{where}:{number}:{column}: '{token}' is an invalid token of {grammar.scope}")
        elif scopes:
            for s in scopes:
                covered[s] = covered.get(s, 0) + 1
    return faults, covered


def scopes_of(grammar, text, word):
    """The scopes of `word`'s token in `text`, one line."""
    for _, _, token, scopes in tokenize(grammar, [text]):
        if token == word:
            return scopes or []
    return []


# ----------------------------------------------------------------------------------------------------------
# The words of each language, from the source.


def keywords(header):
    """The words of `keyword<'i', 'm', ...>` in a grammar header."""
    return {"".join(re.findall(r"'(.)'", m)) for m in re.findall(r"keyword<((?:'.'(?:, )?)+)>", read(header))}


def quoted_list(text):
    return re.findall(r'"(\w+)"', text)


def words():
    layer_kinds_cpp = read("frontend", "src", "layer_kinds.cpp")
    elaborate = read("frontend", "src", "elaborate.cpp")
    apply_schedule = read("scheduler", "src", "apply_schedule.cpp")
    platform_cpp = read("scheduler", "src", "platform.cpp")
    kinds = re.findall(r'\.name = "(\w+)"', layer_kinds_cpp)
    choices = [w for group in re.findall(r"T::choice[^{]*\{([^}]*)\}", layer_kinds_cpp) for w in quoted_list(group)]
    optimizers = quoted_list(re.search(r"optimizers = \{([^}]*)\}", elaborate).group(1))
    schedules = quoted_list(re.search(r"kinds = \{([^}]*)\}", elaborate).group(1))
    split_keys = quoted_list(re.search(r"split_keys\[\] = \{([^}]*)\}", apply_schedule).group(1))
    sched_keys = set(re.findall(r's\.key == "(\w+)"', apply_schedule)) | set(split_keys)
    sched_values = set(re.findall(r'v\.text == "(\w+)"', apply_schedule))
    platform_keys = re.findall(r'\{"(\w+)", Kind::', platform_cpp)
    platform_values = set(re.findall(r'v\.word == "(\w+)"', platform_cpp))
    for name, found in [("layer kinds", kinds), ("choices", choices), ("optimizers", optimizers),
                        ("learning-rate schedules", schedules), ("schedule settings", sched_keys),
                        ("schedule values", sched_values), ("platform settings", platform_keys),
                        ("platform values", platform_values)]:
        if len(found) < 2:
            fail(f"found only {sorted(found)} as the {name} in the source: has it moved?")
    return {
        "net": {"keyword": keywords("grammar/include/dsl/grammar/net.hpp"), "layer kind": set(kinds),
                "choice": set(choices), "optimizer": set(optimizers), "learning-rate schedule": set(schedules)},
        "sched": {"keyword": keywords("grammar/include/dsl/grammar/sched.hpp"), "setting": sched_keys,
                  "value": sched_values},
        "platform": {"keyword": keywords("grammar/include/dsl/grammar/platform.hpp"),
                     "setting": set(platform_keys), "value": platform_values},
    }, kinds


# ----------------------------------------------------------------------------------------------------------


def strings(value):
    """Every string in a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def sources():
    """(path for messages, language, text) of every file of stdlib/ and samples/, and every whole-file example
    of the README and docs/ (fenced blocks tagged net, sched or platform)."""
    out = []
    for top in ("stdlib", "samples"):
        for folder, _, files in sorted(os.walk(os.path.join(ROOT, top))):
            for f in sorted(files):
                ext = f.rsplit(".", 1)[-1]
                if ext in LANGUAGES:
                    path = os.path.join(folder, f)
                    out.append((os.path.relpath(path, ROOT), ext, read(path)))
    docs = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    for doc in docs:
        for m in re.finditer(r"^```(net|sched|platform)\n(.*?)^```", read(doc), re.S | re.M):
            line = read(doc)[: m.start()].count("\n") + 2
            out.append((f"{doc}:{line} (example)", m.group(1), m.group(2)))
    return out


def check_vim(files, meaningful):
    """Each file loaded by vim with the Vim syntax files; None when it ran, else why it cannot run here."""
    vim = shutil.which("vim")
    if not vim:
        return "vim is not installed: the Vim syntax files cannot be loaded"
    script = r"""
let s:out = []
for s:n in range(1, line('$'))
  let s:text = getline(s:n)
  for s:c in range(1, len(s:text))
    let s:group = synIDattr(synIDtrans(synID(s:n, s:c, 1)), 'name')
    if s:group ==# 'Error'
      call add(s:out, printf('%d:%d: ''%s'' is in an Error group', s:n, s:c, s:text[s:c - 1]))
      break
    endif
  endfor
endfor
if &filetype !=# g:want
  call add(s:out, 'filetype ' . &filetype . ', not ' . g:want)
elseif get(b:, 'current_syntax', '') !=# g:want
  call add(s:out, 'syntax not loaded')
endif
if v:errmsg !=# ''
  call add(s:out, 'vim: ' . v:errmsg)
endif
call writefile(s:out, g:report)
qall!
"""
    with tempfile.TemporaryDirectory() as tmp:
        # A vim without syntax highlighting (vim-tiny) cannot check them: a skip, said.
        probe = os.path.join(tmp, "probe")
        subprocess.run([vim, "-u", "NONE", "-i", "NONE", "-N", "-es", "-c", "syntax on",
                        "-c", f"if exists('g:syntax_on') | call writefile(['ok'], '{probe}') | endif", "-c", "qall!"],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
        if not os.path.exists(probe):
            return f"{vim} has no syntax highlighting (vim-tiny?): the Vim syntax files cannot be loaded"
        check = os.path.join(tmp, "check.vim")
        with open(check, "w") as f:
            f.write(script)
        faulty = [("self-test", "net", "x = conv(1) @\n"), ("self-test", "sched", "default N=2 !\n"),
                  ("self-test", "platform", "memory = 16 GiB $\n")]
        for where, ext, text in faulty + files:
            path = os.path.join(tmp, "file." + ext)
            with open(path, "w") as f:
                f.write(text)
            report = os.path.join(tmp, "report")
            if os.path.exists(report):
                os.remove(report)
            cmd = [vim, "-u", "NONE", "-i", "NONE", "-N", "-es",
                   "--cmd", "set runtimepath^=" + os.path.join(ROOT, "editors", "vim"),
                   "--cmd", "let g:want = '" + VIM[ext] + "' | let g:report = '" + report + "'",
                   "-c", "filetype on", "-c", "syntax on", "-c", "edit " + path, "-c", "source " + check]
            r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
            lines = open(report).read().split("\n") if os.path.exists(report) else [f"vim exited {r.returncode}"]
            lines = [line for line in lines if line]
            if where == "self-test":
                if not any("Error group" in line for line in lines):
                    fail(f"Vim's {VIM[ext]} syntax takes '{text.strip()}' without an Error group")
                continue
            for line in lines:
                fail(f"{where}: {line} (vim)")
        # Each layer kind is a keyword of Vim's `.net` syntax: a line of them, each checked.
        path = os.path.join(tmp, "kinds.net")
        kinds = sorted(meaningful["net"]["layer kind"] - meaningful["net"]["keyword"])
        with open(path, "w") as f:
            f.write("\n".join(f"x = {k}" for k in kinds) + "\n")
        report = os.path.join(tmp, "kinds")
        kinds_script = os.path.join(tmp, "kinds.vim")
        with open(kinds_script, "w") as f:
            f.write("let s:out = []\nfor s:n in range(1, line('$'))\n"
                    "  call add(s:out, synIDattr(synID(s:n, 5, 1), 'name'))\nendfor\n"
                    "call writefile(s:out, g:report)\nqall!\n")
        subprocess.run([vim, "-u", "NONE", "-i", "NONE", "-N", "-es",
                        "--cmd", "set runtimepath^=" + os.path.join(ROOT, "editors", "vim"),
                        "--cmd", "let g:report = '" + report + "'",
                        "-c", "filetype on", "-c", "syntax on", "-c", "edit " + path, "-c", "source " + kinds_script],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
        groups = open(report).read().split("\n") if os.path.exists(report) else []
        for i, k in enumerate(kinds):
            if i >= len(groups) or groups[i] != "dslnetLayerKind":
                fail(f"layer kind '{k}' is not a dslnetLayerKind in Vim's .net syntax")
    return None


def main_vim():
    files = sources()
    meaningful, _ = words()
    why = check_vim(files, meaningful)
    if why:
        print(f"skipped: {why}")
        return SKIP
    print(f"{len(files)} files loaded by vim")
    if failures:
        print(f"{len(failures)} failures")
        return 1
    return 0


def main():
    if VIM_CHECK:
        return main_vim()
    grammars = {}
    for ext, name in LANGUAGES.items():
        path = os.path.join(ROOT, "editors", "vscode", "syntaxes", name + ".tmLanguage.json")
        grammars[ext] = Grammar(path)
        if grammars[ext].scope != "source." + name:
            fail(f"{path}: scopeName {grammars[ext].scope}, not source.{name}")
    package = json.loads(read("editors", "vscode", "package.json"))
    for g in package["contributes"]["grammars"]:
        if not os.path.exists(os.path.join(ROOT, "editors", "vscode", g["path"])):
            fail(f"editors/vscode/package.json names {g['path']}, which does not exist")

    files = sources()
    counts = {ext: 0 for ext in LANGUAGES}
    covered = {}
    # The check sees a fault where there is one: a character that starts no token of each language.
    for ext, text in [("net", "x = conv(1) @"), ("sched", "default N=2 !"), ("platform", "memory = 16 GiB $")]:
        if not check_tokens(grammars[ext], "self-test", text)[0]:
            fail(f"the {LANGUAGES[ext]} grammar takes '{text}' without an invalid token")
    for where, ext, text in files:
        faults, scopes = check_tokens(grammars[ext], where, text)
        for f in faults:
            fail(f)
        counts[ext] += 1
        for s, n in scopes.items():
            covered[s] = covered.get(s, 0) + n
    for ext, n in counts.items():
        if n < 2:
            fail(f"only {n} .{ext} files checked")

    meaningful, kinds = words()
    for ext, groups in meaningful.items():
        tm = re.sub(r"\\[A-Za-z]", " ", "\n".join(strings(grammars[ext].json)))  # `\bN\b` holds N
        vim = read("editors", "vim", "syntax", VIM[ext] + ".vim")
        for what, found in groups.items():
            for word in sorted(found):
                pattern = r"(?<![A-Za-z0-9_])" + re.escape(word) + r"(?![A-Za-z0-9_])"
                if not re.search(pattern, tm):
                    fail(f"the {what} '{word}' of .{ext} is not in editors/vscode/syntaxes/{LANGUAGES[ext]}"
                         ".tmLanguage.json")
                if not re.search(pattern, vim):
                    fail(f"the {what} '{word}' of .{ext} is not in editors/vim/syntax/{VIM[ext]}.vim")
    # A layer kind is coloured as one where it is used.
    for kind in kinds:
        if kind in meaningful["net"]["keyword"]:
            continue
        scopes = scopes_of(grammars["net"], f"x = {kind}(1)", kind)
        if not any(s.startswith("support.function.layer") for s in scopes):
            fail(f"layer kind '{kind}' tokenizes as {scopes}, not support.function.layer")

    print(f"{sum(counts.values())} files ({', '.join(f'{n} .{e}' for e, n in counts.items())}) tokenized; "
          f"{len(covered)} scopes in use")
    if failures:
        print(f"{len(failures)} failures")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
