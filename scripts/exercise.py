#!/usr/bin/env python3
"""Exercises: a step's own kernel with the lines that carry its lesson blanked out.

    scripts/exercise.py list                     # every exercise: name, step, goal
    scripts/exercise.py start NAME               # writes exercises-work/NAME/attention.cu
    scripts/exercise.py check NAME               # builds it for the CPU backend and checks it
    scripts/exercise.py solve NAME               # fills the blanks with the step's own lines

Each exercise is exercises/NAME.toml: the step (and, for a step that is a ladder, the rung: its
kernel file is then the rung's, and the check runs that rung with --rung), the goal, the chapter
section to re-read, and the blanks (the exact lines of the kernel file, and a hint for each). The exercise is
made from the step's current source when it starts, so it cannot drift from the step; an
exercise whose lines are no longer in the step is refused (and its CTest fails).

check compiles only the exercise's kernel for the CPU SIMT backend, with the compile and link
commands of the step's own CPU copy in the build directory (unless --build: build-cpu/, the
CPU-only build scripts/main.sh makes without a GPU, if it exists, else build/, the one
scripts/test.sh makes, else a new CPU-only build-cpu/; it builds the step there first if needed;
a kernel that is the step's own file, byte for byte, is the step's binary, which is run instead),
then runs it
against the FP64 reference on a few shapes (odd lengths, Sq != Sk, causal, GQA, per-batch key
lengths, bf16, dropout) under two schedules, forward and greedy. An exercise whose lesson is a
count (`counters = "no bank conflicts"` in its .toml: step 4's swizzle) is built as the step's
counted copy instead (bin/counted/, --counters) and must also cause no bank conflicts: a layout
that computes the right result with conflicting reads fails. An exercise whose lesson is work
left out (`[count]` in its .toml: the tiles that need no mask) builds its first case with gcov's
counters (g++), and an answer whose masked path (the [count] line) runs more often than the step's
own kernel's fails. Exit status: 0 passed, 1 failed
(what the backend or the compiler said, and the chapter section to re-read), 2 bad input.
"""
import argparse
import csv
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from ladders import LADDERS

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "exercises"
WORK = ROOT / "exercises-work"

# Shapes every exercise is checked on (each under every schedule below). Small enough for the CPU
# backend to run in seconds, and covering what the kernels' lessons are about: partial tiles,
# Sq != Sk, causal (bottom-right), GQA, several tiles per row (the ring of step 5 laps twice),
# per-batch query lengths (a batch whose rows end inside a tile), per-batch key lengths with a
# batch that sees one key, bf16 and dropout. The first is fp16 at head dim 64, without dropout (so
# that step 6 takes its unmasked tiles): a check runs it first from a build of that alone
# (QUICK_SHAPE).
SHAPES = [
    "--batch 2 --heads 2 --heads-kv 1 --seqlen-q 70 --seqlen-k 450 --dim 64 --causal "
    "--seqlens-q 70,41",
    "--batch 2 --heads 2 --seq 200 --dim 128 --dtype bf16 --seqlens-k 200,1 --dropout 0.1",
]
SCHEDULES = ["forward", "greedy"]
BEGIN = re.compile(r"^\s*// ---- exercise blank (\d+) of (\d+) -+$")
END = re.compile(r"^\s*// ---- end of blank (\d+) -+$")


class Refusal(Exception):
    """Bad input: one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        raise Refusal(message)


def load(name):
    path = SPECS / f"{name}.toml"
    if not re.fullmatch(r"[A-Za-z0-9_]+", name) or not path.exists():
        raise Refusal(f"no exercise '{name}' (scripts/exercise.py list shows them)")
    with open(path, "rb") as f:
        spec = tomllib.load(f)
    spec["name"] = name
    rungs = dict(LADDERS.get(spec["step"], []))
    if "rung" in spec and spec["rung"] not in rungs:
        raise Refusal(f"exercise {name}: {spec['step']} has no rung '{spec['rung']}'")
    spec["source"] = ROOT / spec["step"] / rungs.get(spec.get("rung"), "attention.cu")
    for blank in spec["blank"]:
        blank["lines"] = blank["lines"].rstrip("\n").split("\n")
        blank["hint"] = blank["hint"].strip().split("\n")
    if "count" in spec:
        count = spec["count"]
        if not (isinstance(count, dict) and isinstance(count.get("line"), str)
                and isinstance(count.get("hint"), str) and count["line"].strip()):
            raise Refusal(f"exercise {name}: its [count] table needs a `line` (the kernel line "
                          f"only the masked path runs) and a `hint` (exercises/{name}.toml)")
        count["line"] = count["line"].strip("\n")
        count["hint"] = " ".join(count["hint"].split())
    return spec


def names():
    return sorted(p.stem for p in SPECS.glob("*.toml"))


def locate(spec, text):
    """Where each blank's lines are in the step's source: [(first line index, count)]."""
    lines = text.split("\n")
    where = []
    for k, blank in enumerate(spec["blank"], 1):
        n = len(blank["lines"])
        hits = [i for i in range(len(lines) - n + 1) if lines[i:i + n] == blank["lines"]]
        if len(hits) != 1:
            raise Refusal(f"exercise {spec['name']} is out of date: blank {k} occurs {len(hits)} "
                          f"times in {spec['source'].relative_to(ROOT)} (update exercises/"
                          f"{spec['name']}.toml)")
        if where and hits[0] < where[-1][0] + where[-1][1]:
            raise Refusal(f"exercise {spec['name']}: blank {k} comes before the end of blank "
                          f"{k - 1} in {spec['source'].relative_to(ROOT)}: list the blanks in "
                          f"the order of the file, without overlaps (exercises/{spec['name']}.toml)")
        where.append((hits[0], n))
    if "count" in spec:
        hits = [i for i, line in enumerate(lines) if line == spec["count"]["line"]]
        if len(hits) != 1 or any(first <= hits[0] < first + n for first, n in where):
            raise Refusal(f"exercise {spec['name']} is out of date: its [count] line occurs "
                          f"{len(hits)} times in {spec['source'].relative_to(ROOT)}"
                          + (", inside a blank" if len(hits) == 1 else "")
                          + f" (update exercises/{spec['name']}.toml)")
    return where


def indent_of(lines):
    code = [line for line in lines if line.strip() and not line.startswith("#")]
    line = code[0] if code else lines[0]
    return line[:len(line) - len(line.lstrip())]


def blanked(spec):
    """The step's source with each blank replaced by its marked hint."""
    lines = spec["source"].read_text().split("\n")
    where = locate(spec, "\n".join(lines))
    total = len(where)
    for k in range(total, 0, -1):  # from the end, so that earlier indices stay valid
        first, n = where[k - 1]
        blank = spec["blank"][k - 1]
        pad = indent_of(blank["lines"])
        block = [f"{pad}// ---- exercise blank {k} of {total} " + "-" * max(4, 60 - len(pad))]
        block += [f"{pad}// {h}".rstrip() for h in blank["hint"]]
        block += [f"{pad}// ({n} line{'s' if n > 1 else ''} in the step's solution)",
                  f"{pad}// ---- end of blank {k} " + "-" * max(4, 66 - len(pad))]
        lines[first:first + n] = block
    return "\n".join(lines)


def filled(spec, text):
    """`text` (a workspace kernel) with every remaining blank filled with the step's lines."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = BEGIN.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        k = int(m.group(1))
        if not 1 <= k <= len(spec["blank"]):
            raise Refusal(f"line {i + 1}: blank {k} is not one of this exercise's")
        j = i + 1
        while j < len(lines) and not END.match(lines[j]):
            j += 1
        if j == len(lines):
            raise Refusal(f"line {i + 1}: blank {k} has no end marker")
        out += spec["blank"][k - 1]["lines"]
        i = j + 1
    return "\n".join(out)


def shown(path):
    """A path as the user would type it: relative to here when below here."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def workspace(spec, where):
    return Path(where) if where else WORK / spec["name"]


def cmd_list(_args):
    for name in names():
        spec = load(name)
        print(f"{name:26s} {spec['step']:22s} {spec['goal']}")
    return 0


def cmd_start(args):
    spec = load(args.name)
    ws = workspace(spec, args.dir)
    kernel = ws / "attention.cu"
    if kernel.exists() and not args.force:
        raise Refusal(f"{kernel} exists (edit it, or start again with --force)")
    text = blanked(spec)
    ws.mkdir(parents=True, exist_ok=True)
    kernel.write_text(text)
    print(f"exercise {spec['name']}: {spec['goal']}")
    print(f"  edit   {shown(kernel)}  ({len(spec['blank'])} blank(s), marked '// ---- exercise blank')")
    print(f"  read   {spec['step']}/README.md, section \"{spec['chapter']}\"")
    extra = f" --dir {shlex.quote(str(args.dir))}" if args.dir else ""
    print(f"  check  scripts/exercise.py check {spec['name']}{extra}")
    return 0


def cmd_solve(args):
    spec = load(args.name)
    ws = workspace(spec, args.dir)
    kernel = ws / "attention.cu"
    if not kernel.exists():
        ws.mkdir(parents=True, exist_ok=True)
        kernel.write_text(blanked(spec))
    text = filled(spec, kernel.read_text())
    kernel.write_text(text)
    same = text == spec["source"].read_text()
    print(f"exercise {spec['name']}: blanks filled with {spec['source'].relative_to(ROOT)}'s lines in "
          f"{shown(kernel)}" + ("" if same else " (your other edits are kept)"))
    return 0


def run(cmd, cwd=None):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, shell=isinstance(cmd, str))


def kernel_object(spec, counted):
    """The object file the build compiles the exercise's kernel file into: the step's CPU copy
    (or counted copy) of attention.cu, or of the rung's file (cmake/AttnStep.cmake's names)."""
    step, stem = spec["step"], spec["source"].stem
    if counted:
        return f"{step}_{stem}_counted.cpp.o"
    if stem == "attention_sm90a":  # the step's Hopper kernel (cmake/AttnStep.cmake's HOPPER_KERNEL)
        return f"{step}_sm90a_cpu.cpp.o"
    return f"{step}_cpu.cpp.o" if stem == "attention" else f"{step}_{stem}_cpu.cpp.o"


def ninja_commands(build, step, counted=False, obj=None):
    """The step's CPU-copy compile command, its library's archive command and its link command,
    as the build directory runs them (counted: the counted copy's compile and link commands, and
    no archive: bin/counted/<step> links the copy's object itself)."""
    target = f"bin/counted/{step}" if counted else f"bin/{step}"
    r = run(["ninja", "-C", str(build), "-t", "commands", target])
    if r.returncode != 0:
        raise Refusal(f"{build}: ninja cannot list the commands of {target} "
                      f"({(r.stderr or r.stdout).strip().splitlines()[-1:]})"
                      + (" (the counted copies need g++)" if counted else ""))
    compile_cmd = archive = link = None
    obj = obj or (f"{step}_attention_counted.cpp.o" if counted else f"{step}_cpu.cpp.o")
    for line in r.stdout.splitlines():
        if obj in line and " -c " in line and "ar qc" not in line:
            compile_cmd = line
        elif f"lib{step}_lib.a" in line and " qc " in line:
            archive = line
        elif f"-o {target} " in line:
            link = line
    if not (compile_cmd and link and (archive or counted)):
        raise Refusal(f"{build}: not a build of this repository's steps (no "
                      f"{'counted' if counted else 'CPU'} copy of {step})")
    return compile_cmd, archive, link


QUICK_FLAGS = "-O1 -findirect-inlining"


# The first case of a check (the first shape under the first schedule), and what a build of the
# answer needs for it alone: fp16 at head dim 64 (common/kernel.h, common/tiles.h).
QUICK_SHAPE = ("-DATTN_ONLY_FP16=1", "-DATTN_ONLY_HEAD_DIM=64")

# An exercise whose lesson is work left out ([count] in its .toml: which tiles need no mask) is
# counted as well: its quick build is compiled with gcov's counters, and the first case's count of
# runs of the [count] line (a line only the masked path runs) is held against the step's own.
COVERAGE = "--coverage -fprofile-update=atomic"


def compiler_of(compile_cmd):
    """The compiler a compile command runs (after a launcher such as ccache)."""
    words = shlex.split(compile_cmd)
    return words[1] if Path(words[0]).name in ("ccache", "sccache") and len(words) > 1 else words[0]


def gcov_missing(compile_cmd):
    """Why the masked path's runs cannot be counted with this build's compiler, or None."""
    compiler = compiler_of(compile_cmd)
    try:
        r = run([compiler, "--version"])
    except OSError as e:
        return f"the build's compiler {compiler} cannot be run ({e.strerror})"
    if r.returncode != 0 or "clang" in r.stdout.lower():
        return "gcov's counts need g++, and this build compiles with " + Path(compiler).name
    if gcov_for(compile_cmd) is None:
        return "gcov (it comes with g++) is not on the PATH"
    return None


def gcov_for(compile_cmd):
    """The gcov of the build's g++ (g++-13's is gcov-13; it reads only its own compiler's
    counters), else the PATH's gcov, or None."""
    compiler = compiler_of(compile_cmd)
    real = Path(shutil.which(compiler) or compiler).resolve()
    for name in (real.name.replace("g++", "gcov").replace("c++", "gcov"), "gcov"):
        found = shutil.which(name, path=f"{real.parent}{os.pathsep}{os.environ.get('PATH', '')}")
        if "gcov" in name and found:
            return found
    return None


def line_runs(gcov, obj, kernel, line):
    """How often the run of ws/.build's `obj` (compiled with COVERAGE) ran the line of `kernel`
    whose text is `line`: gcov's count, summed over the functions that hold it."""
    text = kernel.read_text().split("\n")
    numbers = {i + 1 for i, each in enumerate(text) if each == line}
    r = run([gcov, "--json-format", "--stdout", obj.name], cwd=obj.parent)
    if r.returncode != 0:
        raise Refusal(f"gcov could not read {obj}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return sum(x["count"] for each in json.loads(r.stdout).get("files", [])
               if Path(each["file"]).resolve() == kernel.resolve()
               for x in each["lines"] if x["line_number"] in numbers)


def build_exercise(spec, ws, build, rebuild_step, quick=False):
    """The answer's executable (or the step's own, where the answer is the step's file), or why
    not. quick: only what the check's first case runs (QUICK_SHAPE), in a fraction of the time;
    "" where there is no quick build (the step's own binary, or a counted check)."""
    step = spec["step"]
    counted = "counters" in spec
    if quick and (counted or (ws / "attention.cu").read_text() == spec["source"].read_text()):
        return ""
    cache = build / "CMakeCache.txt"
    if not (build / "build.ninja").exists() and cache.exists():
        generator = next((line.split("=", 1)[1] for line in cache.read_text(errors="replace")
                          .splitlines() if line.startswith("CMAKE_GENERATOR:")), "another")
        raise Refusal(f"{shown(build)} was configured with the '{generator}' generator; the "
                      f"exercises reuse a Ninja build's commands: use the build scripts/build.sh "
                      f"makes (build/), or --build with a directory configured by cmake -G Ninja")
    if not (build / "build.ninja").exists():
        print(f"exercise: configuring {shown(build)} (once)", flush=True)
        # CPU-only: an exercise runs on the CPU backend, and nothing else needs building here
        r = run(["cmake", "-S", str(ROOT), "-B", str(build), "-G", "Ninja",
                 "-DCMAKE_BUILD_TYPE=Release", "-DATTN_GPU=OFF"])
        if r.returncode != 0:
            raise Refusal(f"cmake failed to configure {build}: run scripts/setup.sh first "
                          f"({(r.stderr.strip().splitlines() or ['?'])[-1]})")
    if counted and cache.exists() and "ATTN_COUNTERS:BOOL=OFF" in cache.read_text(errors="replace"):
        raise Refusal(f"exercise {spec['name']} counts bank conflicts, and {shown(build)} has no "
                      f"counted copies (configured without ATTN_COUNTERS: they need g++): "
                      f"check it with --build pointing at a g++ build such as build-cpu/")
    target = f"{step}_counted_bin" if counted else step
    binary = build / "bin" / ("counted" if counted else "") / step
    if rebuild_step or not binary.exists():
        print(f"exercise: building {target} in {shown(build)} (its libraries are reused)",
              flush=True)
        r = run(["cmake", "--build", str(build), "--target", target])
        if r.returncode != 0:
            raise Refusal(f"the step itself does not build in {build}: "
                          f"{(r.stdout + r.stderr).strip().splitlines()[-1:]}")
    compile_cmd, archive, link = ninja_commands(build, step, counted,
                                                kernel_object(spec, counted))
    if (ws / "attention.cu").read_text() == spec["source"].read_text():
        # The kernel is the step's own file, byte for byte: the step's binary is what compiling
        # it would make (the same command on the same text), so it is checked instead.
        print(f"exercise: the kernel is {spec['source'].relative_to(ROOT)} itself: checking "
              f"{shown(binary)}", flush=True)
        (ws / ".build").mkdir(exist_ok=True)  # where check writes the counts
        return str(binary.resolve())
    if counted:
        return build_counted(step, ws, build, compile_cmd, link, kernel_object(spec, counted))
    flags = " ".join(QUICK_SHAPE) if quick else ""
    if quick and "count" in spec and gcov_missing(compile_cmd) is None:
        flags += " " + COVERAGE  # the first case counts the masked path's runs (too_strict)
    return build_copy(spec, ws, build, (compile_cmd, archive, link), ws / "attention.cu",
                      "quick" if quick else step, flags)


def build_copy(spec, ws, build, commands, kernel, name, flags=""):
    """`kernel` built as the step's CPU copy, with the step's own command lines (commands: its
    compile, archive and link) and `flags` added to the compile and the link: the executable
    ws/.build/NAME, or why not."""
    step = spec["step"]
    compile_cmd, archive, link = commands
    out = ws / ".build"
    out.mkdir(exist_ok=True)
    wrapper = out / f"kernel_{name}.cpp"
    wrapper.write_text(f"// Generated by scripts/exercise.py: the exercise's kernel for the CPU "
                       f"backend.\n#include \"{kernel.resolve()}\"\n")
    cpu_obj = f"{step}/CMakeFiles/{step}_cpu.dir/{kernel_object(spec, False)}"
    lib = f"{step}/lib{step}_lib.a"
    obj = str((out / f"kernel_{name}.o").resolve())
    # The step's own command lines with the exercise in place of the step's kernel.
    source = re.search(r"-c (\S+)", compile_cmd).group(1)
    compile_cmd = compile_cmd.replace(source, shlex.quote(str(wrapper.resolve())))
    compile_cmd = compile_cmd.replace(cpu_obj, shlex.quote(obj))
    if QUICK_FLAGS not in compile_cmd and QUICK_FLAGS in (build / "build.ninja").read_text():
        # The flags the build gives the rungs' CPU copies (cmake/AttnStep.cmake, g++ only): a
        # third of the compile time, and the check's matrix still runs in seconds.
        compile_cmd += " " + QUICK_FLAGS
    r = run(f"{compile_cmd} {flags}", cwd=build)
    if r.returncode != 0:
        errors = [line for line in (r.stdout + r.stderr).splitlines()
                  if "error" in line or "attention.cu:" in line]
        return "it does not compile:\n" + "\n".join(errors[:20] or r.stderr.splitlines()[:20])
    new_lib = shlex.quote(str((out / f"lib{step}_{name}_exercise.a").resolve()))
    exe = str((out / name).resolve())
    archive = archive.replace(cpu_obj, shlex.quote(obj)).replace(lib, new_lib)
    link = link.replace(lib, new_lib).replace(f"-o bin/{step} ",
                                              f"-o {shlex.quote(exe)} {flags} ")
    for cmd in (archive, link):
        r = run(cmd, cwd=build)
        if r.returncode != 0:
            return "it does not link:\n" + "\n".join((r.stdout + r.stderr).splitlines()[:20])
    return exe


def build_counted(step, ws, build, compile_cmd, link, kernel_obj):
    """The exercise's kernel as the step's counted copy: bin/counted/<step>'s own compile and link
    commands, with the exercise in place of the step's kernel."""
    out = ws / ".build"
    out.mkdir(exist_ok=True)
    wrapper = out / "kernel_counted.cpp"
    wrapper.write_text(f"// Generated by scripts/exercise.py: the exercise's kernel, counted.\n"
                       f"#include \"{(ws / 'attention.cu').resolve()}\"\n")
    obj_in_build = re.search(r"-o (\S+" + re.escape(kernel_obj) + ")", compile_cmd).group(1)
    obj = shlex.quote(str((out / "kernel_counted.o").resolve()))
    source = re.search(r"-c (\S+)", compile_cmd).group(1)
    compile_cmd = compile_cmd.replace(source, shlex.quote(str(wrapper.resolve())))
    compile_cmd = compile_cmd.replace(obj_in_build, obj)
    r = run(compile_cmd, cwd=build)
    if r.returncode != 0:
        errors = [line for line in (r.stdout + r.stderr).splitlines()
                  if "error" in line or "attention.cu:" in line]
        return "it does not compile:\n" + "\n".join(errors[:20] or r.stderr.splitlines()[:20])
    exe = str((out / f"{step}-counted").resolve())
    link = link.replace(obj_in_build, obj).replace(f"-o bin/counted/{step} ",
                                                   f"-o {shlex.quote(exe)} ")
    r = run(link, cwd=build)
    if r.returncode != 0:
        return "it does not link:\n" + "\n".join((r.stdout + r.stderr).splitlines()[:20])
    return exe


def conflicts(csv_path):
    """Bank conflicts of the counted runs in csv_path: [(what, count)] where nonzero."""
    found = []
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            for col, what in (("ldsm_conflicts", "ldmatrix"), ("ldgsts_conflicts", "cp.async"),
                              ("lds_conflicts", "shared loads"), ("sts_conflicts", "shared stores")):
                if int(row[col] or 0) > 0:
                    found.append((f"{what} (D={row['dim']})", int(row[col])))
    return found


def case(spec, exe, schedule, shape):
    """The command line that runs one case of the check with `exe` (the exercise's rung)."""
    return [exe, "--backend", "cpu", "--schedule", schedule, *shape.split()] + (
        ["--rung", spec["rung"]] if "rung" in spec else [])


def too_strict(spec, ws, build):
    """After the first case of an answer built with COVERAGE: why it took the masked path more
    often than the step's own kernel does on that case (a [count] exercise), or None. The step's
    count is made once, by the same quick build of the step's file, and kept in ws/.build."""
    line = spec["count"]["line"]
    kernel = ws / "attention.cu"
    if kernel.read_text().split("\n").count(line) != 1:
        return (f"the check counts how often the line `{line.strip()}` runs, and it is not in "
                f"{shown(kernel)} exactly once: put it back as the step has it")
    commands = ninja_commands(build, spec["step"], False, kernel_object(spec, False))
    gcov = gcov_for(commands[0])
    answer = line_runs(gcov, ws / ".build" / "kernel_quick.o", kernel, line)
    # What the step's count depends on: its kernel and every header (common/), the build's
    # commands and flags, the line and the case.
    headers = sorted((ROOT / "common").rglob("*.h"))
    key = hashlib.sha256("\n".join([spec["source"].read_text(), *commands, line, COVERAGE,
                                    *QUICK_SHAPE, SHAPES[0], SCHEDULES[0]]
                                   + [h.read_text() for h in headers]).encode()).hexdigest()
    cache = ws / ".build" / "step_count.json"
    try:
        known = json.loads(cache.read_text()) if cache.exists() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        known = {}  # an interrupted write: counted again
    if not isinstance(known.get(key), int):
        print(f"exercise: counting the masked path's runs in {spec['source'].relative_to(ROOT)} "
              f"(once)", flush=True)
        (ws / ".build" / "kernel_step_count.gcda").unlink(missing_ok=True)
        exe = build_copy(spec, ws, build, commands, spec["source"], "step_count",
                         " ".join(QUICK_SHAPE) + " " + COVERAGE)
        cmd = case(spec, exe, SCHEDULES[0], SHAPES[0])
        try:
            ok = exe.startswith("/") and subprocess.run(cmd, capture_output=True,
                                                        timeout=600).returncode == 0
        except subprocess.TimeoutExpired:
            ok = False
        if not ok:
            raise Refusal(f"the step's own {spec['source'].relative_to(ROOT)} could not be counted "
                          f"in {shown(build)}")
        known = {key: line_runs(gcov, ws / ".build" / "kernel_step_count.o", spec["source"], line)}
        cache.write_text(json.dumps(known))
    step = known[key]
    if answer <= step:
        return None
    return (f"the result is right, but the kernel took the masked path more often than the "
            f"step's: `{line.strip()}` ran {answer:,} times on the first case, the step's "
            f"{step:,} (counted by gcov). {spec['count']['hint']}")


def default_build():
    """build-cpu/ (scripts/main.sh's CPU-only build, the fastest to rebuild) if it is there, else
    build/ (scripts/test.sh's), else a new build-cpu/."""
    for name in ("build-cpu", "build"):
        if (ROOT / name / "build.ninja").exists():
            return ROOT / name
    return ROOT / "build-cpu"


def cmd_check(args):
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise Refusal(f"--timeout {args.timeout:g}: give a finite number of seconds above 0")
    spec = load(args.name)
    ws = workspace(spec, args.dir).resolve()
    if not (ws / "attention.cu").exists():
        raise Refusal(f"exercise {spec['name']} is not started in {ws} "
                      f"(scripts/exercise.py start {spec['name']})")
    locate(spec, spec["source"].read_text())  # the exercise matches the step
    build = Path(args.build).resolve() if args.build else default_build()
    reread = f"re-read: {spec['step']}/README.md, section \"{spec['chapter']}\""
    left = [i + 1 for i, line in enumerate((ws / "attention.cu").read_text().split("\n"))
            if BEGIN.match(line)]
    if left:
        print(f"note: blank markers left at line(s) {', '.join(map(str, left))}", flush=True)
    counts = ws / ".build" / "counters.csv"

    def failed(exe, schedule, shape):
        """The case run by exe; True, with the failure printed, where it fails."""
        cmd = case(spec, exe, schedule, shape)
        if "counters" in spec:
            cmd += ["--counters", "--csv", str(counts), "--quiet"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"FAIL: {' '.join(shlex.quote(c) for c in cmd[1:])}")
            print(f"  did not finish in {args.timeout:g} s: a loop that never ends? (--timeout "
                  f"sets the limit)")
            print(reread)
            return True
        said = (r.stdout + r.stderr).strip().splitlines()
        if r.returncode != 0:
            print(f"FAIL: {' '.join(shlex.quote(c) for c in cmd[1:])}")
            print("\n".join("  " + line for line in said[:14]))
            print(reread)
        return r.returncode != 0

    # First the first case alone, from a build of what it needs: a wrong answer, which fails
    # there most often, is told so in a quarter of the time; then every case, from the full build.
    exe = build_exercise(spec, ws, build, not args.no_build, quick=True)
    if exe and not exe.startswith("/"):
        print(f"FAIL: {exe}\n{reread}")
        return 1
    # (the quick build of a [count] exercise has gcov's counters where the compiler is g++)
    missing = gcov_missing(ninja_commands(build, spec["step"])[0]) if exe and "count" in spec \
        else "no count"
    if missing is None:
        (ws / ".build" / "kernel_quick.gcda").unlink(missing_ok=True)  # gcov adds runs up
    if exe and failed(exe, SCHEDULES[0], SHAPES[0]):
        return 1
    if exe and "count" in spec and missing is not None:
        print(f"note: the masked path's runs are not counted: {missing}", flush=True)
    why = missing is None and too_strict(spec, ws, build)
    if why:
        print(f"FAIL: {why}\n{reread}")
        return 1
    counted = ", its masked path counted" if missing is None else ""
    if exe and args.first_case:  # the quick build has run it
        print(f"PASS: {spec['name']} (the first case{counted})")
        return 0
    exe = build_exercise(spec, ws, build, not args.no_build and not exe)
    if not exe.startswith("/"):
        print(f"FAIL: {exe}\n{reread}")
        return 1
    if counts.exists():
        counts.unlink()
    cases = [(SCHEDULES[0], SHAPES[0])] if args.first_case else [
        (schedule, shape) for schedule in SCHEDULES for shape in SHAPES]
    for schedule, shape in cases:
        if failed(exe, schedule, shape):
            return 1
    if "counters" in spec:
        found = conflicts(counts)
        if found:
            print("FAIL: the result is right, but the layout has bank conflicts (counted by "
                  "--counters): " + ", ".join(f"{n:,} in {what}" for what, n in found))
            print(reread)
            return 1
    print(f"PASS: {spec['name']} (" + ("the first case" if args.first_case else
                                     f"{len(SHAPES)} shapes x schedules {', '.join(SCHEDULES)}")
          + (", no bank conflicts" if "counters" in spec else "") + counted + ")")
    return 0


def main():
    parser = OneLineParser(description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    sub.add_parser("list", help="every exercise: name, step, goal")
    for command, help_text in (("start", "write the exercise's kernel into its workspace"),
                               ("check", "build the exercise for the CPU backend and check it"),
                               ("solve", "fill the blanks with the step's own lines")):
        p = sub.add_parser(command, help=help_text)
        p.add_argument("name")
        p.add_argument("--dir", help="the workspace (default: exercises-work/NAME)")
        if command == "start":
            p.add_argument("--force", action="store_true", help="start again over an existing one")
        if command == "check":
            p.add_argument("--build", help="the build directory whose step is reused (default: "
                           "build-cpu if it exists, else build, else a new CPU-only build-cpu)")
            p.add_argument("--no-build", action="store_true",
                           help="do not (re)build the step first (it must be built)")
            p.add_argument("--first-case", action="store_true",
                           help="check the first case alone (its first shape and schedule)")
            p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                           help="how long one case may run before it fails (default 600)")
    try:
        args = parser.parse_args()
        return {"list": cmd_list, "start": cmd_start, "check": cmd_check,
                "solve": cmd_solve}[args.command](args)
    except Refusal as e:
        print(f"exercise: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
