#!/usr/bin/env python3
"""Which source each GPU figure measured: a hash of every kernel's source, as attn_suite labels the
kernels, so that a result can say when the kernel it measured has changed since (docs/gpus.md).

    scripts/kernel_sources.py LABEL...              label<TAB>hash<TAB>files, from the working tree
    scripts/kernel_sources.py --commit C LABEL...   the same from commit C's tree
    attn_suite list --kernels ... | scripts/kernel_sources.py --manifest
                                                    the MANIFEST's sources: block (gpu_bundle.sh)
    scripts/kernel_sources.py --add-to RESULTS_DIR  adds to a GPU run made before bundles recorded
                                                    sources the hashes of its kernels (check.csv),
                                                    computed from the run's commit, saying so

A kernel's source is its .cu file (the ladder's file for a rung, scripts/ladders.py; the step's
attention.cu otherwise; a tile configuration is its step's) and the repository's own headers it
includes, followed transitively as nvcc compiles it: `#include "..."` resolved beside the file that
includes it, then from the repository's root, leaving out only what a branch of `#if
defined(__CUDACC__)` / `#ifndef __CUDACC__` keeps from nvcc (the CPU backend's headers in
common/kernel.h). Its hash is kernel_hash() below, the one definition: the same function computes
the hash of a run's kernels and today's, which gpu_report.py compares. Comments count: a change to
one is a change to the source. Host code (step.cpp, the tuned table) is not part of it.
"""
import hashlib
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
METHOD = ("sha256 of the kernel's .cu file and the repository headers nvcc's compile of it "
          "includes (scripts/kernel_sources.py)")


def refuse(message):
    print(f"kernel_sources: {message}", file=sys.stderr)
    raise SystemExit(2)


def tree_reader(commit=None, root=ROOT):
    """read(path) -> the text of a repository file, or None where there is none: the working tree's,
    or commit's (git show)."""
    if commit is None:
        def read(path):
            try:
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                    return f.read()
            except OSError:
                return None
        return read
    cache = {}

    def read_commit(path):
        if path not in cache:
            r = subprocess.run(["git", "-C", root, "show", f"{commit}:{path}"],
                               capture_output=True)
            cache[path] = r.stdout.decode("utf-8", "replace") if r.returncode == 0 else None
        return cache[path]
    return read_commit


def ladders_of(read):
    """scripts/ladders.py of that tree, as a namespace (its LADDERS, VARIANT, run_name)."""
    text = read("scripts/ladders.py")
    if text is None:
        refuse("no scripts/ladders.py in that tree")
    space = {}
    exec(compile(text, "scripts/ladders.py", "exec"), space)  # noqa: S102 - the repository's own
    return space


def kernel_file(label, ladders):
    """The .cu file of a kernel as attn_suite labels it, or None for a rung no ladder names:
    "step4_tensorcore[pv]" -> step4_tensorcore/rung2_pv.cu; "step5_warpspecialized[sm90a]" (the
    ladder's last rung) -> attention_sm90a.cu; a step, a tile configuration ("step4_tensorcore
    br128_bc64_w8_s2"), or the first variant of a step whose ladder leads to another (step 5's
    sm80: ladders.VARIANT) -> the step's attention.cu."""
    name = label.split(" ")[0]
    step = name.split("[")[0]
    for rung, file in ladders["LADDERS"].get(step, []):
        if ladders["run_name"](step, rung) == name:
            return f"{step}/{file}"
    if name != step and step not in ladders["VARIANT"]:
        return None
    return f"{step}/attention.cu"


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*)")


def nvcc_includes(text):
    """The quoted includes of a source as nvcc sees them: those in a branch that __CUDACC__ rules
    out are left out; every other condition is taken as possibly true (both branches followed)."""
    out, stack = [], []  # per open #if: True/False where __CUDACC__ decides the branch, else None
    for line in text.splitlines():
        m = _DIRECTIVE.match(line)
        if not m:
            continue
        word, rest = m.group(1), re.sub(r"\s+", "", m.group(2).split("//")[0])
        if word in ("if", "ifdef", "ifndef"):
            cond = {"ifdef": f"defined({rest})", "ifndef": f"!defined({rest})"}.get(word, rest)
            stack.append({"defined(__CUDACC__)": True, "!defined(__CUDACC__)": False}.get(cond))
        elif word == "elif" and stack:
            stack[-1] = False if stack[-1] is True else None
        elif word == "else" and stack:
            stack[-1] = None if stack[-1] is None else not stack[-1]
        elif word == "endif" and stack:
            stack.pop()
        elif word == "include" and False not in stack:
            inc = _INCLUDE.match(line)
            if inc:
                out.append(inc.group(1))
    return out


def kernel_files(label, read, ladders):
    """The kernel's .cu file and the repository headers it includes, transitively, sorted; None
    when the .cu file is not in that tree."""
    first = kernel_file(label, ladders)
    if first is None or read(first) is None:
        return None
    seen, todo = set(), [first]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for inc in nvcc_includes(read(path)):
            for candidate in (os.path.normpath(os.path.join(os.path.dirname(path), inc)), inc):
                if read(candidate) is not None:
                    todo.append(candidate)
                    break
    return sorted(seen)


def kernel_hash(label, read=None, ladders=None):
    """The hash of a kernel's source (16 hex digits), or None when its .cu file is not in the tree:
    sha256 over each file of kernel_files(), path and text, in order."""
    read = read or tree_reader()
    ladders = ladders or ladders_of(read)
    files = kernel_files(label, read, ladders)
    if files is None:
        return None
    h = hashlib.sha256()
    for path in files:
        data = read(path).encode()
        h.update(f"{path}\n{len(data)}\n".encode() + data)
    return h.hexdigest()[:16]


def hashes(labels, read=None):
    """{label: kernel_hash} of every label, from one tree."""
    read = read or tree_reader()
    ladders = ladders_of(read)
    return {label: kernel_hash(label, read, ladders) for label in labels}


def manifest_block(labels):
    """The MANIFEST's sources: block: a line per kernel, "  HASH LABEL" (a label may hold a
    space)."""
    return "\n".join(["sources: " + METHOD]
                     + [f"  {h or 'none'} {label}" for label, h in hashes(labels).items()])


def parse_manifest(text):
    """{label: hash} from a MANIFEST's sources: block ({} where it has none)."""
    out, inside = {}, False
    for line in text.splitlines():
        if line.startswith("sources:"):
            inside = True
        elif inside and line.startswith("  "):
            h, _, label = line.strip().partition(" ")
            out[label] = None if h == "none" else h
        else:
            inside = False
    return out


def add_to(results):
    """Adds to RESULTS_DIR/run.json the hashes of the run's kernels, from its commit's tree."""
    path = os.path.join(results, "run.json")
    try:
        with open(path) as f:
            run = json.load(f)
    except (OSError, ValueError) as e:
        refuse(f"{results}: not a GPU run's results ({e})")
    sources = run.get("provenance", {}).get("sources") or {}
    if sources and not sources.get("added_afterwards"):
        refuse(f"{results}: its bundle recorded its kernels' sources already")
    commit = run.get("commit", "")
    if subprocess.run(["git", "-C", ROOT, "cat-file", "-e", f"{commit}^{{commit}}"],
                      capture_output=True).returncode != 0:
        refuse(f"{results}: its commit {commit or '(none)'} is not in this repository's history")
    with open(os.path.join(results, "check.csv")) as f:
        labels = list(dict.fromkeys(line.split(",")[0] for line in f.read().splitlines()[1:]
                                    if line))
    if not labels:
        refuse(f"{results}: its check.csv names no kernel")
    command = f"scripts/kernel_sources.py --add-to {os.path.relpath(results, ROOT)}"
    run.setdefault("provenance", {})["sources"] = {
        "method": METHOD, "kernels": hashes(labels, tree_reader(commit)),
        "added_afterwards": f"computed from the tree of the run's commit {commit} by `{command}`: "
                            "the run's bundle was made before bundles recorded their kernels' "
                            "sources; the kernels are those of its check.csv"}
    with open(path, "w") as f:
        json.dump(run, f, indent=1)
        f.write("\n")
    print(f"kernel_sources: {len(labels)} kernels' hashes from {commit} added to {path}")
    return 0


def main(argv):
    args = argv[1:]
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if args[:1] == ["--add-to"] and len(args) == 2:
        return add_to(args[1])
    if args == ["--manifest"]:
        labels = [line.split("\t")[0] for line in sys.stdin.read().splitlines() if line.strip()]
        if not labels:
            refuse("--manifest: no kernel labels on stdin (attn_suite list --kernels prints "
                   "them)")
        print(manifest_block(labels))
        return 0
    commit = None
    if args[:1] == ["--commit"]:
        if len(args) < 2:
            refuse("--commit needs a commit")
        commit, args = args[1], args[2:]
    if not args or any(a.startswith("-") for a in args):
        refuse("usage: kernel_sources.py [--commit C] LABEL... | --manifest | --add-to RESULTS_DIR")
    read = tree_reader(commit)
    ladders = ladders_of(read)
    for label in args:
        files = kernel_files(label, read, ladders)
        print(f"{label}\t{kernel_hash(label, read, ladders) or 'none'}\t"
              + (" ".join(files) if files else "(no such file)"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
