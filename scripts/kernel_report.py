#!/usr/bin/env python3
"""The kernel report: for every kernel of every step and each target architecture, what ptxas
allocated (registers, spills, stack), how the kernel is launched (threads and dynamic shared
memory per block), the resulting occupancy, and which tensor-core and async-copy instructions it
contains, in PTX and in SASS.

    scripts/kernel_report.py [--build build] [--out docs/kernel_report.md]
                             [--no-spills STEP ...] [--fits STEP ...] [--require-tensor-core STEP ...]
                             [--no-serialized-wgmma STEP ...]
                             [--budget STEP:D:INSTR_PER_MMA:REGS ...] [--require-ptx STEP[/KERNEL]:REGEX]
                             [--compare STEP:BASE:RATIO[:KERNEL] ...]
                             [--save-mainloop FILE] [--baseline FILE --chapter README.md]

Sources, all from the normal build (nothing is compiled again):
  - ptxas --resource-usage output, kept beside each kernel object by cmake/nvcc_capture.sh;
  - launches: each step binary is run on the CPU backend for every head dim with
    SIMT_LOG_LAUNCHES, which logs the launch site, threads and dynamic shared memory;
  - PTX and SASS: cuobjdump (and nvdisasm) from the PyPI packages nvidia-cuda-cuobjdump and
    nvidia-cuda-nvdisasm, which scripts/setup.sh --python installs into .venv.

A rung of a step's ladder (its kernel file rungN_NAME.cu) is reported as the step "STEP[NAME]",
and its launches are logged with --rung NAME; the checks below hold only the step's own kernels
(the last rung) unless a rung is named ("STEP[NAME]"): an earlier rung may spill, and the ladder's
table shows where a later rung removes the spill.
--no-spills fails (exit 1) if a kernel of those steps spills or uses a stack frame;
--fits fails if a kernel of those steps or of their rungs, launched as the step launches it,
leaves an SM of an architecture it is built for room for no block (shared memory, registers or
threads beyond what one SM has: the launch fails there);
--no-serialized-wgmma fails if ptxas serialised the wgmmas of a kernel of those steps or of any
of their rungs (its warning C7514: it then waits for each wgmma before the next, and the
asynchrony the kernel is written for is gone);
--require-tensor-core STEP[/KERNEL] ... fails unless every kernel of those steps (named KERNEL,
when given) contains mma.sync, ldmatrix and cp.async in PTX, and HMMA, LDSM and LDGSTS in SASS, on
every architecture (a Hopper kernel, NAME_sm90a: wgmma, TMA, try_wait and setmaxnreg).

The main-loop table counts one iteration of the hot path of each tensor-core kernel's main loop
in SASS (scripts/mainloop_report.py says how the loop and the path are found).
Kernels instantiated per tile configuration (step4: its last template argument, a name such as
br64_bc64_w4_s2 from step4_tensorcore/configs.h) are reported once per configuration, and their
launches are logged with --config NAME.
--budget STEP:D:X:R[:CONFIG] fails (exit 1) unless every kernel of STEP at head dim D (in tile
configuration CONFIG when given) that does not
instantiate dropout (no `true` template argument) issues at most X instructions per tensor
instruction in that hot path, with no inner loop, no spills and at most R registers, on sm_80
and on sm_90a (those of the two that the build contains; at least one must be there).
--require-ptx STEP[/KERNEL]:REGEX fails unless every kernel of STEP (named KERNEL, when given)
has REGEX in its PTX on every architecture.
--archs ARCH,... and --steps STEP ... restrict the report (and its checks) to those architectures
and steps (with their rungs): a check that reads nothing else finishes sooner.
--require-archs STEP:ARCH,...[:RUNG_ARCH,...] fails unless every kernel of STEP is compiled for
exactly those architectures (e.g. sm_75 for steps 1-3 only), and every kernel of its rungs (but
the sm_90a-only Hopper ones) for exactly RUNG_ARCH,... (the rungs get the step's lowest alone).
An mbarrier wait inside the main loop (a one-block loop that polls the barrier) is reported
apart and is not an inner loop for --budget.
--compare STEP:BASE:RATIO[:KERNEL] fails (exit 1) unless every kernel of STEP without dropout
(named KERNEL, when given; a Hopper kernel NAME_sm90a is compared with BASE's NAME), on each
architecture, issues at most RATIO times the instructions per tensor instruction of BASE's kernel
of the same dtype and head dim on that architecture (BASE's counts are per mma.sync, one
m16n8k16 = 4096 FLOPs per warp; a STEP that issues wgmma is counted per 4096 FLOPs too).
--save-mainloop writes the main-loop counts as JSON; --baseline reads such a file (an earlier
build) and --chapter rewrites the before/after table between the markers
<!-- mainloop:begin --> and <!-- mainloop:end --> of that Markdown file. --compare-chapter writes
the figures --compare checked between <!-- compare:begin --> and <!-- compare:end --> of a
Markdown file.
A run that only checks (no --out, no chapter) disassembles only the steps its checks read the PTX
or SASS of (--require-tensor-core, --require-ptx, --budget, --compare); its table shows "n/a"
in those columns for the others.
"""
import argparse
import concurrent.futures
import contextlib
import glob
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mainloop_report  # noqa: E402
from arch_cost import current_default  # noqa: E402
from ladders import LADDERS, OWN, label, run_name  # noqa: E402
from markers import replaced  # noqa: E402

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")
HEAD_DIMS = [64, 80, 96, 128]

# Per-SM limits (CUDA C Programming Guide, "Compute Capabilities" table; for sm_75 and sm_120 as
# CCCL's cuda/__device/arch_traits.h, in the toolkit and the nvidia-cuda-cccl wheel, states them).
# "reserved": shared memory the system reserves per block (1 KB from sm_80 on, none on sm_75).
ARCH = {
    "sm_75": {"regs": 65536, "threads": 1024, "blocks": 16, "smem": 65536, "reserved": 0},
    "sm_80": {"regs": 65536, "threads": 2048, "blocks": 32, "smem": 167936, "reserved": 1024},
    "sm_89": {"regs": 65536, "threads": 1536, "blocks": 24, "smem": 102400, "reserved": 1024},
    "sm_90a": {"regs": 65536, "threads": 2048, "blocks": 32, "smem": 233472, "reserved": 1024},
    "sm_120": {"regs": 65536, "threads": 1536, "blocks": 24, "smem": 102400, "reserved": 1024},
}
PTX_OPS = {"mma": r"\bmma\.sync\.aligned\.m16n8k16", "ldmatrix": r"\bldmatrix\.sync",
           "cp.async": r"\bcp\.async\.cg", "wgmma": r"\bwgmma\.mma_async",
           "tma": r"\bcp\.async\.bulk\.tensor", "try_wait": r"\bmbarrier\.try_wait",
           "setmaxnreg": r"\bsetmaxnreg\."}
SASS_OPS = {"HMMA": r"\bHMMA\.16816", "LDSM": r"\bLDSM\.", "LDGSTS": r"\bLDGSTS\.",
            "HGMMA": r"\bHGMMA\.", "UTMALDG": r"\bUTMALDG\b", "SYNCS": r"\bSYNCS\."}
# What --require-tensor-core asks of a kernel: the sm_80 instructions, or for a Hopper kernel
# (its name ends in _sm90a) wgmma and TMA.
TENSOR_CORE_OPS = ["mma", "ldmatrix", "cp.async", "HMMA", "LDSM", "LDGSTS"]
HOPPER_OPS = ["wgmma", "tma", "try_wait", "setmaxnreg", "HGMMA", "UTMALDG", "SYNCS"]
SETMAXNREG = re.compile(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)")


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return dict(zip(names, out))


def short(name):
    name = name.split("(")[0]
    name = re.sub(r"^(void )?(\w+::)+gpu::", "", name)
    name = re.sub(r"\bstep\w*::", "", name)  # a step's tile configuration type
    return name.replace("__nv_bfloat16", "bf16").replace("__half", "fp16")


CONFIG = re.compile(r"\bbr\d+_bc\d+_w\d+_s\d+\b")


def config_of(kernel):
    """The kernel's tile configuration (configs.h's naming scheme), or None."""
    m = CONFIG.search(kernel)
    return m.group(0) if m else None


def default_config(step):
    """The step's default tile configuration: `using DefaultConfig = NAME;` in its configs.h."""
    try:
        text = open(os.path.join(ROOT, step, "configs.h")).read()
    except OSError:
        return None
    m = re.search(r"using DefaultConfig = (\w+);", text)
    return m.group(1) if m else None


def base_and_dim(kernel):
    """Kernel name and head dim (its first integer template argument, if any)."""
    m = re.match(r"(\w+)(?:<(.*)>)?", kernel)
    args = [a.strip() for a in (m.group(2) or "").split(",")]
    dims = [int(a) for a in args if a.isdigit()]
    return m.group(1), (dims[0] if dims else None)


def has_dropout(kernel):
    """Whether the kernel is an instantiation with dropout: its first bool template argument (the
    steps' kDropout) is true."""
    m = re.match(r"\w+<(.*)>", kernel)
    args = [a.strip() for a in (m.group(1) if m else "").split(",")]
    bools = [a for a in args if a in ("true", "false")]
    return bool(bools) and bools[0] == "true"


RUNG_FILE = re.compile(r"rung\d+_(\w+)\.cu\.o$")
# ptxas's warning that it serialised a kernel's wgmmas, and the function it names.
SERIALIZED = re.compile(r"\(C7514\).*serialized due to (.*?) in the function '(\w+)'")


def split_rung(step):
    """'step4_tensorcore[mma]' -> ('step4_tensorcore', 'mma'); a step -> (step, None)."""
    m = re.match(r"(\w+)\[(\w+)\]$", step)
    return (m.group(1), m.group(2)) if m else (step, None)


def ptxas_rows(build):
    rows = []
    # An object the build no longer makes (left by an earlier configuration, e.g. a rung before
    # the rungs had a target of their own) is not reported: build.ninja names those it makes.
    try:
        with open(os.path.join(build, "build.ninja")) as f:
            made = f.read()
    except OSError:
        made = None
    for path in sorted(glob.glob(os.path.join(build, "step*", "CMakeFiles", "*_gpu.dir",
                                              "*.resource-usage.txt"))):
        step = path.split(os.sep + "CMakeFiles" + os.sep)[0].split(os.sep)[-1]
        obj = path[: -len(".resource-usage.txt")]
        if made is not None and f"build {os.path.relpath(obj, build)}:" not in made:
            continue
        # A rung of the step's ladder (rungN_NAME.cu): reported as "<step>[NAME]", as it runs.
        if m := RUNG_FILE.match(os.path.basename(obj)):
            step = f"{step}[{m.group(1)}]"
        # The sm90a kernel of a step whose ladder passes its sm80 kernel (step 6): its kernels
        # keep the sm80 kernel's names, and are told apart as the variant runs.
        elif step in OWN and os.path.basename(obj) == "attention_sm90a.cu.o":
            step = f"{step}[sm90a]"
        cur, serialized, first = None, {}, len(rows)
        with open(path) as f:
            for line in f:
                if m := SERIALIZED.search(line):
                    serialized[m.group(2)] = m.group(1)
                if m := ENTRY.search(line):
                    cur = {"step": step, "obj": obj, "mangled": m.group(1), "arch": m.group(2),
                           "regs": 0, "stack": 0, "spill_st": 0, "spill_ld": 0, "smem_static": 0,
                           "serialized": None}
                    rows.append(cur)
                elif cur and (m := FRAME.search(line)):
                    cur["stack"], cur["spill_st"], cur["spill_ld"] = map(int, m.groups())
                elif cur and (m := USED.search(line)):
                    cur["regs"] = int(m.group(1))
                    cur["smem_static"] = int(m.group(3) or 0)
        for r in rows[first:]:
            r["serialized"] = serialized.get(r["mangled"])
    return rows


def is_hopper(r):
    """A Hopper kernel (wgmma, TMA), held to Hopper's instructions: its name ends in _sm90a."""
    return base_and_dim(r["kernel"])[0].endswith("_sm90a")


# A step's variants, where the report names a file's kernels after one ("step6_backward[sm90a]":
# the sm90a file of a step whose ladder passes its sm80 kernel): run with --variant, not --rung.
VARIANTS = ("sm80", "sm90a")


def sm90a_only(r):
    """A kernel built for sm_90a alone: a Hopper kernel, or any of a step's sm90a file."""
    return is_hopper(r) or split_rung(r["step"])[1] == "sm90a"


def made_by():
    """What a kernel_report_cache/ entry was made by, as 8 hex digits: this file and the analysis
    it uses (mainloop_report.py), and whether nvdisasm was found (cuobjdump -sass needs it). A
    changed rule for the hot path, SASS_OPS or launch parser is not served what the one before
    found."""
    h = hashlib.sha1()
    for source in (mainloop_report.__file__, __file__):
        with open(source, "rb") as f:
            h.update(f.read())
    h.update(b"nvdisasm" if find_tool("nvdisasm") else b"")
    return h.hexdigest()[:8]


def keep(path, stem, suffix, value, opener=open):
    """Writes value as JSON to path (in kernel_report_cache/, named stem-...suffix) whole or not at
    all, for checks running beside this one read it, after removing the entries of stem an earlier
    build left. A cache that cannot be written is not an error."""
    cache = os.path.dirname(path)
    with contextlib.suppress(OSError):
        os.makedirs(cache, exist_ok=True)
        for old in glob.glob(os.path.join(cache, stem + "-*" + suffix)):
            with contextlib.suppress(FileNotFoundError):  # another report removed it first
                os.remove(old)
        tmp = f"{path}.{os.getpid()}"
        with opener(tmp, "w") as f:
            json.dump(value, f)
        os.replace(tmp, path)


def launches(build, step, configs, hopper=False):
    """(kernel base name, head dim or None, config or None, dropout) -> (threads, dynamic smem),
    from the CPU backend (run once per tile configuration of the step, if it has any, once more
    with --variant sm90a for a step with a Hopper kernel, and each with and without dropout, whose
    kernels may take other tiles). Kept in kernel_report_cache/ as the disassembly is, keyed by
    the step's binary (its size and time) and made_by: the report's several checks run the
    binary's hundred launches once."""
    name = step
    step, rung = split_rung(step)
    variant = rung if rung in VARIANTS else None
    rung = None if variant else rung
    exe = os.path.join(build, "bin", step)
    out = {}
    if not os.path.exists(exe):  # a partial build: launches unknown, the rest still reported
        return out
    st = os.stat(exe)
    key = repr((name, sorted(configs), hopper, "dropout")).encode()
    stem = "launches-" + hashlib.sha1(key).hexdigest()[:16]
    saved = os.path.join(build, "kernel_report_cache",
                         f"{stem}-{st.st_size}-{st.st_mtime_ns}-{made_by()}.json")
    try:
        with open(saved) as f:
            return {tuple(k): tuple(v) for k, v in json.load(f)}
    except (OSError, ValueError):
        pass
    variants = [variant] if variant else [None, "sm90a"] if hopper else [None]
    # The backend as it presents itself by default (sm_90a): SIMT_PRESENT_AS=sm_80 in the caller's
    # environment would refuse the Hopper variant, and the cache would keep the refusal.
    env = {k: v for k, v in os.environ.items() if k != "SIMT_PRESENT_AS"}
    crashed = False
    with tempfile.TemporaryDirectory() as d:
        for dim, config, variant, dropout in [(dim, c, v, p) for dim in HEAD_DIMS
                                              for c in sorted(configs) or [None]
                                              for v in variants for p in (False, True)]:
            log = os.path.join(d, f"{dim}.{config}.{variant}.{dropout}.log")
            cmd = [exe, "--backend", "cpu", "--seq", "16", "--dim", str(dim), "--iters", "1",
                   "--warmup", "0", "--no-check", "--quiet"]
            cmd += ((["--config", config] if config else []) +
                    (["--variant", variant] if variant else []) +
                    (["--rung", rung] if rung else []) +
                    (["--dropout", "0.1"] if dropout else []))
            r = subprocess.run(cmd, env={**env, "SIMT_LOG_LAUNCHES": log}, capture_output=True)
            crashed |= r.returncode < 0  # killed (a refusal exits 2: a config's other head dims)
            if not os.path.exists(log):
                continue
            for line in open(log):
                site, threads, smem = line.split()[:3]
                source, lineno = site.rsplit(":", 1)
                src = open(source).read().splitlines()
                # The kernel named by the last launch( at or before the site's line, on that
                # line or the next (a call wrapped after its parenthesis).
                before = " ".join(src[max(0, int(lineno) - 4): int(lineno)])
                calls = list(re.finditer(r"launch\(", before))
                name = calls and re.match(r"\s*(\w+)", before[calls[-1].end():] + " " +
                                          " ".join(src[int(lineno): int(lineno) + 1]))
                if name:
                    out[(name.group(1), dim, config, dropout)] = (int(threads), int(smem))
    if not crashed:  # what a killed run left out is not kept
        keep(saved, stem, ".json", [[list(k), list(v)] for k, v in out.items()])
    return out


def occupancy(arch, regs, threads, smem):
    """(blocks per SM, occupancy), or (None, None) for an architecture ARCH does not list."""
    lim = ARCH.get(arch)
    if lim is None:
        return None, None
    warps = (threads + 31) // 32
    regs_per_warp = ((max(regs, 1) * 32 + 255) // 256) * 256
    by_regs = lim["regs"] // (regs_per_warp * warps)
    by_threads = lim["threads"] // (warps * 32)
    by_smem = lim["smem"] // (smem + lim["reserved"]) if smem else lim["blocks"]
    blocks = min(by_regs, by_threads, by_smem, lim["blocks"])
    return blocks, blocks * warps / (lim["threads"] // 32)


def find_tool(name):
    for d in glob.glob(os.path.join(ROOT, ".venv", "lib", "python3*", "site-packages", "nvidia",
                                    "cu*", "bin")):
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    return shutil.which(name)


def count_ops(ops, text):
    """{op: occurrences of its pattern in text}. The patterns above are literals between word
    boundaries, counted as substrings (instructions stand between blanks and punctuation in PTX
    and SASS); a pattern with any other regex syntax is searched as a regex."""
    found = {}
    for op, rx in ops.items():
        literal = rx.removeprefix(r"\b").removesuffix(r"\b").replace(r"\.", ".")
        found[op] = (text.count(literal) if re.fullmatch(r"[\w.]+", literal)
                     else len(re.findall(rx, text)))
    return found


def per_function(text, start):
    """Splits a cuobjdump listing into {mangled name: text} at each `start` marker (".entry ",
    "Function : ") followed by the name: once, not line by line (listings run to tens of MB)."""
    out = {}
    for part in text.split(start)[1:]:
        name, _, body = part.partition("\n")
        out[re.match(r"\w+", name).group(0)] = body
    return out


def instructions(cuobjdump, obj, arch, build):
    """({kernel: PTX}, {kernel: its SASS_OPS counts}, {kernel: its main loop}) of one object on
    one architecture, the main loop (mainloop_report.main_loop) of each kernel with tensor
    instructions. Kept in the build directory (kernel_report_cache/, keyed by the object's path,
    size and time, and made_by), so that the report's several checks disassemble and analyse each
    object once; the SASS itself is not kept (tens of MB an object, which every check would read
    again)."""
    st = os.stat(obj)
    cache = os.path.join(build, "kernel_report_cache")
    stem = hashlib.sha1(os.path.abspath(obj).encode()).hexdigest()[:16] + "-" + arch
    path = os.path.join(cache, f"{stem}-{st.st_size}-{st.st_mtime_ns}-{made_by()}.json.gz")
    try:
        with gzip.open(path, "rt") as f:
            ptx, sass_ops, loops = json.load(f)
            return ptx, sass_ops, loops
    except (OSError, ValueError, EOFError):
        pass
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(cuobjdump) + os.pathsep + env.get("PATH", "")
    ptx = subprocess.run([cuobjdump, "-ptx", "-arch", arch, obj],
                         capture_output=True, text=True, env=env).stdout
    sass = subprocess.run([cuobjdump, "-sass", "-arch", arch, obj], capture_output=True,
                          text=True, env=env).stdout
    sass = per_function(sass, "Function : ")
    sass_ops = {name: count_ops(SASS_OPS, text) for name, text in sass.items()}
    loops = {name: mainloop_report.main_loop(text) for name, text in sass.items()
             if sass_ops[name]["HMMA"] or "HGMMA" in text}
    result = (per_function(ptx, ".entry "), sass_ops, loops)
    keep(path, stem, ".json.gz", result,
         lambda name, mode: gzip.open(name, mode + "t", compresslevel=1))
    return result


LOOP_COLS = ["tensor", "LDSM", "copy", "MUFU", "fp32", "int", "pred", "move", "branch", "barrier",
             "other", "total"]


def mainloop_table(loops):
    lines = ["| step | kernel | arch | regs | " + " | ".join(LOOP_COLS) + " | instr/mma | "
             "instr per 4096 FLOPs | inner loops | next loop instr/mma |",
             "|" + "---|" * (len(LOOP_COLS) + 8)]
    for r in loops:
        c = r["loop"]
        second = f"{c['second_per_tensor']:.2f}" if "second_per_tensor" in c else "-"
        waits = f" (+{c['wait_loops']} mbarrier waits)" if c.get("wait_loops") else ""
        lines.append(f"| {r['step']} | `{r['kernel']}` | {r['arch']} | {r['regs']} | " +
                     " | ".join(str(c[k]) for k in LOOP_COLS) +
                     f" | {c['per_tensor']:.2f} | {per_4096_flops(r):.2f} | "
                     f"{c['inner_loops']}{waits} | {second} |")
    return "\n".join(lines)


def rewrite_between(path, name, lines):
    """Replaces what stands between <!-- NAME:begin --> and <!-- NAME:end --> in a Markdown
    file with `lines`."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = open(path).read()
    if begin not in text or end not in text:
        print(f"kernel_report: {path} has no {begin} ... {end} markers", file=sys.stderr)
        return 2
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path, "w") as f:
        f.write(head + begin + "\n" + "\n".join(lines) + "\n" + end + tail)
    return 0


def rewrite_chapter(chapter, baseline, loops):
    """Rewrites the before/after block of a chapter: the baseline file's kernels that the
    current build also has (same step, kernel name up to its first template argument after the
    head dim, arch), side by side."""
    before = json.load(open(baseline))
    lines = ["| kernel | arch | regs before | regs after | mma before | mma after | instr before | "
             "instr after | instr/mma before | instr/mma after |", "|" + "---|" * 10]
    for key, b in sorted(before.items()):
        step, rest = key.split(" ", 1)
        kernel, arch = rest.rsplit(" ", 1)
        base, dim = base_and_dim(kernel)
        dtype = kernel.split("<")[1].split(",")[0]
        now = [r for r in loops if r["step"] == step and r["arch"] == arch and
               base_and_dim(r["kernel"]) == (base, dim) and
               config_of(r["kernel"]) in (None, default_config(step)) and
               r["kernel"].split("<")[1].split(",")[0] == dtype and "true" not in r["kernel"]]
        for r in now:
            c = r["loop"]
            lines.append(f"| `{r['kernel']}` | {arch} | {b['regs']} | {r['regs']} | "
                         f"{b['tensor']} | {c['tensor']} | {b['total']} | {c['total']} | "
                         f"{b['per_tensor']:.2f} | "
                         f"{c['per_tensor']:.2f} |")
    return rewrite_between(chapter, "mainloop", lines)


def toolkit_version(build):
    """The CUDA compiler version the build used (CMake's CMakeCUDACompiler.cmake), or None."""
    for path in glob.glob(os.path.join(build, "CMakeFiles", "*", "CMakeCUDACompiler.cmake")):
        if m := re.search(r'set\(CMAKE_CUDA_COMPILER_VERSION "([^"]+)"\)', open(path).read()):
            return m.group(1)
    return None


# The architecture and kernel a ladder's table reads (step 5's ladder leads to its sm_90a kernel).
RUNG_KERNELS = {"step5_warpspecialized": ("sm_90a", "attention_kernel_sm90a")}


def rung_table(step, rows, toolkit):
    """A ladder's rungs as compiled: fp16, D = 64, sm_80 (or RUNG_KERNELS), without and with
    dropout, and the main loop at D = 128 too (where the shapes of the head dims part)."""
    arch, kernel = RUNG_KERNELS.get(step, ("sm_80", "attention_kernel"))
    lines = [f"Generated by `scripts/kernel_report.py --rungs-chapter {step}/README.md` from the "
             f"build (nvcc {toolkit}, {arch}, fp16, D = 64 unless named); nothing here ran on a "
             "GPU, do not edit by hand. (+N loops): the hot path holds N loops of its own (tile "
             "loads, P V on CUDA cores), each counted as one pass.", "",
             "| rung | regs | shared memory per block | blocks per SM | main-loop instructions "
             "per 4096 tensor FLOPs | the same at D = 128 | regs with dropout | with dropout | "
             "spilled with dropout (bytes stored/loaded, worst head dim) |",
             "|---|---|---|---|---|---|---|---|---|"]
    default = default_config(step)
    for i, (rung, _) in enumerate(LADDERS[step]):
        # The last rung's kernels are the step's own (whatever variant its runs are named by).
        name = step if i + 1 == len(LADDERS[step]) else run_name(step, rung)
        found, wide = {}, None
        for r in rows:
            base, dim = base_and_dim(r["kernel"])
            if (r["step"] == name and r["arch"] == arch and base == kernel
                    and dim in (64, 128) and r["kernel"].startswith(kernel + "<fp16")
                    and config_of(r["kernel"]) in (None, default)):
                if dim == 64:
                    found["true" in r["kernel"]] = r
                elif "true" not in r["kernel"]:
                    wide = r
        if False not in found:
            raise SystemExit(f"kernel_report: {name}: no fp16 D=64 kernels on {arch} in the build")
        # A rung without a kDropout template argument runs one kernel either way.
        plain, drop = found[False], found.get(True, found[False])
        one_kernel = True not in found
        spilled = max(((r["spill_st"], r["spill_ld"]) for r in rows
                       if r["step"] == name and r["arch"] == arch
                       and (one_kernel or "true" in r["kernel"])
                       and config_of(r["kernel"]) in (None, default)), default=(0, 0))

        def per(r):
            if not r.get("loop"):
                return "-"
            inner = r["loop"].get("inner_loops", 0)
            return f"{per_4096_flops(r):.2f}" + (f" (+{inner} loops)" if inner else "")
        lines.append(f"| {label(step, i)} {rung} | {plain['regs']} | "
                     f"{(plain['smem_static'] + plain['smem_dyn']) / 1024:.1f} KiB | "
                     f"{plain.get('blocks', '-')} | {per(plain)} | {per(wide) if wide else '-'} | "
                     f"{drop['regs']} | {per(drop)} | "
                     f"{spilled[0]}/{spilled[1]} |")
    return "\n".join(lines)


def backward_rung_table(step, rows, toolkit):
    """Step 6's ladder as compiled: each rung's dkdv_kernel and dq_kernel (fp16, no dropout,
    sm_80; the sm90a variant's rungs on sm_90a, after the sm80 kernel's row on sm_90a too, which
    they are read against), their registers and their main loops' instructions per mma.sync at
    D = 64 and 128."""
    lines = [f"Generated by `scripts/kernel_report.py --rungs-chapter {step}/README.md` from the "
             f"build (nvcc {toolkit}, sm_80, the sm90a rungs and the kernel before them sm_90a, "
             "fp16, no dropout; the main loop's hot path per warp, every pair's exponential "
             "included, counted in SASS by `scripts/mainloop_report.py`); nothing here ran on a "
             "GPU, do not edit by hand. \"-\": no main loop with `mma.sync`; \"+n loops\": loops "
             "inside it (a wait's spin, a zeroing), counted once.", "",
             "| rung | `dkdv_kernel` regs (D = 64 / 128) | instructions per mma.sync, D = 64 | "
             "D = 128 | `dq_kernel` regs (D = 64 / 128) | instructions per mma.sync, D = 64 | "
             "D = 128 |", "|---|---|---|---|---|---|---|"]

    def cells(name, arch):
        out = []
        for kernel in ("dkdv_kernel", "dq_kernel"):
            found = {}
            for r in rows:
                base, dim = base_and_dim(r["kernel"])
                if (r["step"] == name and r["arch"] == arch and base == kernel
                        and r["kernel"].startswith(kernel + "<fp16")):
                    found[dim] = r
            if not found:
                raise SystemExit(f"kernel_report: {name}: no fp16 {kernel} on {arch} in the build")
            # Rungs 6.1-6.4 loop over the head dim at run time: one kernel for every D.
            at = {d: found.get(d, found.get(None)) for d in (64, 128)}
            out.append(f"{at[64]['regs']} / {at[128]['regs']}" if at[64] is not at[128]
                       else f"{at[64]['regs']}")
            for d in (64, 128):
                loop = at[d].get("loop")
                out.append(f"{loop['per_tensor']:.2f}" + (
                    f" (+{loop['inner_loops']} loops)" if loop.get("inner_loops") else "")
                           if loop and loop.get("tensor") else "-")
        return " | ".join(out)

    files = [f for _, f in LADDERS[step]]
    first_hopper = files.index("attention_sm90a.cu") if "attention_sm90a.cu" in files else None
    for i, (rung, file) in enumerate(LADDERS[step]):
        # The report's names: the sm80 kernel's rows are the step's, the sm90a one's "[sm90a]".
        if rung in OWN.get(step, {}) or (i + 1 == len(files) and first_hopper is None):
            name = step
        else:
            name = f"{step}[sm90a]" if file == "attention_sm90a.cu" else run_name(step, rung)
        if i == first_hopper:  # the kernel the Hopper rungs are read against, on their GPU
            own = [j for j, (r, _) in enumerate(LADDERS[step]) if r in OWN.get(step, {})][-1]
            lines.append(f"| {label(step, own)} {LADDERS[step][own][0]}, sm_90a | "
                         + cells(step, "sm_90a") + " |")
        arch = "sm_90a" if first_hopper is not None and i >= first_hopper else "sm_80"
        lines.append(f"| {label(step, i)} {rung} | " + cells(name, arch) + " |")
    return "\n".join(lines)


# A chapter's comparison of its step's first kernel with the step before it, written with the
# ladder's table: (marker, the step before, arch, kernel).
PAIR_TABLES = {"step5_warpspecialized": ("sm80-static", "step4_tensorcore", "sm_80",
                                         "attention_kernel")}


def pair_table(step, rows, toolkit):
    """The step's kernel beside the step before it's, as compiled (fp16, D = 64 and 128, no
    dropout, the default tile configuration): registers and the main loop's hot path."""
    _, before, arch, kernel = PAIR_TABLES[step]
    lines = [f"Generated by `scripts/kernel_report.py --rungs-chapter {step}/README.md` from the "
             f"build (nvcc {toolkit}, {arch}, fp16, no dropout; the main loop's hot path per warp, "
             "counted in SASS by `scripts/mainloop_report.py`); nothing here ran on a GPU, do not "
             "edit by hand.", "",
             "| kernel | regs | main loop: HMMA | LDSM | LDGSTS | barrier | total | "
             "instr / mma |", "|---|---|---|---|---|---|---|---|"]
    for dim in (64, 128):
        for name in (before, step):
            found = [r for r in rows if r["step"] == name and r["arch"] == arch
                     and base_and_dim(r["kernel"]) == (kernel, dim)
                     and r["kernel"].startswith(kernel + "<fp16") and "true" not in r["kernel"]
                     and config_of(r["kernel"]) in (None, default_config(name)) and r.get("loop")]
            if len(found) != 1:
                raise SystemExit(f"kernel_report: {name}: {len(found)} fp16 D={dim} kernels on "
                                 f"{arch} with a main loop in the build, expected 1")
            r, c = found[0], found[0]["loop"]
            lines.append(f"| {name[:5]} `{kernel}<fp16, {dim}>` | {r['regs']} | {c['tensor']} | "
                         f"{c['LDSM']} | {c['copy']} | {c['barrier']} | {c['total']} | "
                         f"{per_4096_flops(r):.2f} |")
    return "\n".join(lines)


def per_4096_flops(r):
    """Main-loop instructions per 4096 FLOPs of tensor work (one mma.sync m16n8k16 per warp)."""
    c = r["loop"]
    flops = c.get("tensor_flops") or 4096 * c["tensor"]
    return c["total"] / (flops / 4096)


def check_compare(compares, rows, table=None):
    """Checks each --compare; appends a Markdown row per kernel compared to `table` if given."""
    status = 0
    for spec in compares:
        try:
            step, base, ratio, *kernel = spec.split(":")
            ratio = float(ratio)
            if len(kernel) > 1:
                raise ValueError(spec)
            kernel = kernel[0] if kernel else None
        except ValueError:
            print(f"kernel_report: --compare {spec}: expected STEP:BASE:RATIO[:KERNEL]",
                  file=sys.stderr)
            return 2
        # A base step with tile configurations is compared in its default one, by the kernel's
        # name without the configuration argument.
        default = default_config(base)

        def key(r):
            name = r["kernel"]
            if config_of(name):
                name = re.sub(r",\s*" + re.escape(config_of(name)), "", name)
            return name.replace("_sm90a<", "<"), r["arch"]

        ref = {key(r): r for r in rows if r["step"] == base and r.get("loop")
               and config_of(r["kernel"]) in (None, default)}
        checked = [r for r in rows if r["step"] == step and r.get("loop")
                   and "true" not in r["kernel"]
                   and kernel in (None, base_and_dim(r["kernel"])[0])]
        if not checked:
            print(f"kernel_report: --compare {spec}: no main loop of {step} in the build",
                  file=sys.stderr)
            status = 1
        for r in checked:
            b = ref.get(key(r))
            where = f"{step} {r['kernel']} on {r['arch']}"
            if b is None:
                print(f"kernel_report: {where}: {base} has no such kernel to compare with",
                      file=sys.stderr)
                status = 1
                continue
            if table is not None:
                units = (r["loop"].get("tensor_flops") or 4096 * r["loop"]["tensor"]) / 4096
                table.append(f"| `{r['kernel']}` | {r['arch']} | {r['loop']['total']} | "
                             f"{units:g} | {per_4096_flops(r):.2f} | {per_4096_flops(b):.2f} | "
                             f"{per_4096_flops(r) / per_4096_flops(b):.2f} | {ratio:g} |")
            if per_4096_flops(r) > ratio * per_4096_flops(b) + 1e-9:
                print(f"kernel_report: {where}: {per_4096_flops(r):.2f} main-loop instructions "
                      f"per 4096 tensor FLOPs, more than {ratio} x {base}'s "
                      f"{per_4096_flops(b):.2f}", file=sys.stderr)
                status = 1
            else:
                print(f"kernel_report: {where}: {per_4096_flops(r):.2f} vs {base} "
                      f"{per_4096_flops(b):.2f} instructions per 4096 tensor FLOPs (at most "
                      f"{ratio} x)")
    return status


def check_budgets(budgets, rows):
    status = 0
    for spec in budgets:
        try:
            step, dim, limit, regs, *config = spec.split(":")
            dim, limit, regs = int(dim), float(limit), int(regs)
            if len(config) > 1:
                raise ValueError(spec)
            config = config[0] if config else None
        except ValueError:
            print(f"kernel_report: --budget {spec}: expected STEP:D:INSTR_PER_MMA:REGS[:CONFIG]",
                  file=sys.stderr)
            return 2
        checked = [r for r in rows if r["step"] == step and r["arch"] in ("sm_80", "sm_90a")
                   and base_and_dim(r["kernel"])[1] == dim and "true" not in r["kernel"]
                   and r["sass"].get("HMMA") and config in (None, config_of(r["kernel"]))]
        if not checked:
            print(f"kernel_report: --budget {spec}: no tensor-core kernel of {step} at D={dim} "
                  "on sm_80 or sm_90a in the build", file=sys.stderr)
            status = 1
        for r in checked:
            c = r.get("loop")
            where = f"{r['step']} {r['kernel']} on {r['arch']}"
            if not c:
                print(f"kernel_report: {where}: no main loop found", file=sys.stderr)
                status = 1
                continue
            if c["per_tensor"] > limit:
                print(f"kernel_report: {where}: {c['per_tensor']:.2f} instructions per tensor "
                      f"instruction in the main loop, budget {limit}", file=sys.stderr)
                status = 1
            if c["inner_loops"]:
                print(f"kernel_report: {where}: the main loop contains {c['inner_loops']} inner "
                      "loop(s)", file=sys.stderr)
                status = 1
            if r["regs"] > regs or r["spill_st"] or r["spill_ld"] or r["stack"]:
                print(f"kernel_report: {where}: {r['regs']} registers (budget {regs}), "
                      f"{r['spill_st']}/{r['spill_ld']} B spilled, {r['stack']} B stack",
                      file=sys.stderr)
                status = 1
    return status


def check_archs(specs, rows):
    """--require-archs STEP:ARCH,...[:RUNG_ARCH,...]: every kernel of STEP exists on exactly the
    first architectures, and every kernel of its rungs (the Hopper ones, built for sm_90a alone,
    excepted) on exactly the second (the first when not given). 1 if not."""
    status = 0
    for spec in specs:
        step, _, archs = spec.partition(":")
        archs, _, rung_archs = archs.partition(":")
        want_step = set(archs.split(",")) if archs else set()
        want_rung = set(rung_archs.split(",")) if rung_archs else want_step
        kernels = {}
        for r in rows:
            if split_rung(r["step"])[0] == step and not sm90a_only(r):
                kernels.setdefault((r["step"], r["kernel"]), set()).add(r["arch"])
        if not kernels:
            print(f"kernel_report: --require-archs {spec}: no kernels of {step} in the build",
                  file=sys.stderr)
            status = 1
        for (name, kernel), have in sorted(kernels.items()):
            want = want_rung if split_rung(name)[1] else want_step
            if have != want:
                print(f"kernel_report: {name} {kernel} is compiled for {', '.join(sorted(have))}"
                      f"; expected {', '.join(sorted(want))}", file=sys.stderr)
                status = 1
    return status


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", help="write the Markdown report here")
    ap.add_argument("--no-spills", nargs="+", default=[], metavar="STEP")
    ap.add_argument("--fits", nargs="+", default=[], metavar="STEP")
    ap.add_argument("--require-tensor-core", nargs="+", action="extend", default=[],
                    metavar="STEP[/KERNEL]")
    ap.add_argument("--no-serialized-wgmma", nargs="+", default=[], metavar="STEP")
    ap.add_argument("--budget", action="append", default=[], metavar="STEP:D:X:R[:CONFIG]")
    ap.add_argument("--compare", action="append", default=[], metavar="STEP:BASE:RATIO")
    ap.add_argument("--require-ptx", action="append", default=[], metavar="STEP:REGEX")
    ap.add_argument("--require-archs", action="append", default=[],
                    metavar="STEP:ARCH,...[:RUNG_ARCH,...]",
                    help="exit 1 unless the kernels of STEP are compiled for exactly these "
                         "architectures, each for every one (its rungs' for RUNG_ARCH,...)")
    ap.add_argument("--archs", metavar="ARCH,...",
                    help="only these architectures (e.g. sm_80,sm_90a): a check that reads no "
                         "other runs sooner")
    ap.add_argument("--steps", nargs="+", metavar="STEP",
                    help="only these steps and their rungs")
    ap.add_argument("--disassemble", action="store_true",
                    help="only disassemble the objects into the build's kernel_report_cache/, "
                         "several at once (CTest runs this once, before the checks that read it)")
    ap.add_argument("--save-mainloop", metavar="FILE")
    ap.add_argument("--baseline", metavar="FILE")
    ap.add_argument("--chapter", metavar="README")
    ap.add_argument("--rungs-chapter", action="append", default=[], metavar="README",
                    help="rewrite the ladder's table of a step's chapter between <!-- "
                         "rungs-static:begin --> and <!-- rungs-static:end -->")
    ap.add_argument("--check-rungs-chapter", action="append", default=[], metavar="README",
                    help="exit 1 if that table differs from the build (77 if the build's nvcc "
                         "is not the one the table was made with)")
    ap.add_argument("--compare-chapter", metavar="README",
                    help="write the --compare figures between <!-- compare:begin --> and "
                         "<!-- compare:end --> of this Markdown file")
    args = ap.parse_args()

    required_ptx = []
    for spec in args.require_ptx:
        step, _, rx = spec.partition(":")
        step, _, kernel = step.partition("/")
        if not rx:
            print(f"kernel_report: --require-ptx {spec}: expected STEP[/KERNEL]:REGEX",
                  file=sys.stderr)
            return 2
        required_ptx.append((step, kernel or None, rx))
    tensor_core = [(s.partition("/")[0], s.partition("/")[2] or None)
                   for s in args.require_tensor_core]
    rows = ptxas_rows(args.build)
    if not rows:
        print(f"kernel_report: no ptxas reports under {args.build}/; build first "
              "(scripts/build.sh)", file=sys.stderr)
        return 2
    if args.archs:
        rows = [r for r in rows if r["arch"] in args.archs.split(",")]
    if args.steps:
        rows = [r for r in rows if split_rung(r["step"])[0] in args.steps]
    if not rows:
        print(f"kernel_report: no kernels of {' '.join(args.steps or ['any step'])} on "
              f"{args.archs or 'any architecture'} in {args.build}", file=sys.stderr)
        return 2
    if args.disassemble:
        cuobjdump = find_tool("cuobjdump")
        if cuobjdump is None:
            print("kernel_report: --disassemble: no cuobjdump (scripts/setup.sh --python installs "
                  "it into .venv)", file=sys.stderr)
            return 2
        pairs = sorted({(r["obj"], r["arch"]) for r in rows})
        # Processes, not threads: the main loops' analysis is Python.
        with concurrent.futures.ProcessPoolExecutor(os.cpu_count() or 1) as pool:
            list(pool.map(instructions, [cuobjdump] * len(pairs), [o for o, _ in pairs],
                          [a for _, a in pairs], [args.build] * len(pairs)))
        print(f"kernel_report: {len(pairs)} objects x architectures disassembled into "
              f"{os.path.join(args.build, 'kernel_report_cache')}")
        return 0
    # The main loops (the slowest part) only where a table or a check reads them.
    need_loops = bool(args.out or args.budget or args.compare or args.rungs_chapter
                      or args.check_rungs_chapter or args.chapter or args.save_mainloop
                      or args.compare_chapter)
    names = demangle(sorted({r["mangled"] for r in rows}))
    for r in rows:
        r["kernel"] = short(names[r["mangled"]])
    # The launches (threads, shared memory: occupancy) only where a table shows them.
    # (--fits alone: the launches of its steps only.)
    need_launches = bool(args.out or args.rungs_chapter or args.check_rungs_chapter)
    launch = {s: launches(args.build, s, {config_of(r["kernel"]) for r in rows if r["step"] == s}
                          - {None}, any(is_hopper(r) for r in rows if r["step"] == s))
              if need_launches or split_rung(s)[0] in args.fits else {}
              for s in sorted({r["step"] for r in rows})}
    cuobjdump = find_tool("cuobjdump")
    have_sass = cuobjdump is not None and find_tool("nvdisasm") is not None
    dumps = {}
    # A run that only checks (it writes no table or chapter) disassembles only the steps whose
    # PTX or SASS its checks read; the others' rows print "n/a" in those columns.
    writes = bool(args.out or args.rungs_chapter or args.check_rungs_chapter or args.chapter
                  or args.save_mainloop or args.compare_chapter)
    checks = bool(args.no_spills or args.require_tensor_core or required_ptx or args.require_archs
                  or args.budget or args.compare or args.no_serialized_wgmma or args.fits)
    read = None
    if checks and not writes:
        read = {split_rung(s)[0] for s in
                ({s for s, _ in tensor_core} | {s for s, _, _ in required_ptx}
                 | {b.split(":")[0] for b in args.budget}
                 | {x for c in args.compare for x in c.split(":")[:2]})}
    for r in rows:
        base, dim = base_and_dim(r["kernel"])
        config = config_of(r["kernel"])
        dropout = has_dropout(r["kernel"])
        cfg = (launch[r["step"]].get((base, dim, config, dropout)) or
               launch[r["step"]].get((base, HEAD_DIMS[0], config, dropout)))
        r["threads"], r["smem_dyn"] = cfg if cfg else (0, 0)
        if r["threads"]:
            r["blocks"], r["occ"] = occupancy(r["arch"], r["regs"], r["threads"],
                                              r["smem_static"] + r["smem_dyn"])
        r["ptx"], r["sass"] = {}, {}
        if cuobjdump and (read is None or split_rung(r["step"])[0] in read):
            key = (r["obj"], r["arch"])
            if key not in dumps:
                dumps[key] = instructions(cuobjdump, r["obj"], r["arch"], args.build)
            ptx, sass_ops, loops = dumps[key]
            r["ptx"] = count_ops(PTX_OPS, ptx.get(r["mangled"], ""))
            r["ptx_required"] = {rx: len(re.findall(rx, ptx.get(r["mangled"], "")))
                                 for s, k, rx in required_ptx if s == r["step"]
                                 and k in (None, base_and_dim(r["kernel"])[0])}
            regs = SETMAXNREG.findall(ptx.get(r["mangled"], ""))
            r["setmaxnreg"] = " / ".join(f"{op} {n}" for op, n in sorted(set(regs)))
            if have_sass:
                r["sass"] = sass_ops.get(r["mangled"]) or count_ops(SASS_OPS, "")
                if need_loops and r["mangled"] in loops:  # the kernels with tensor instructions
                    r["loop"] = loops[r["mangled"]]
    rows.sort(key=lambda r: (r["step"], r["kernel"], r["arch"]))

    def counts(d):
        return " ".join(f"{k} {v}" for k, v in d.items() if v) or "-" if d else "n/a"

    lines = ["| step | kernel | arch | regs | setmaxnreg | spill st/ld (B) | stack (B) | threads | "
             "smem/block (B) | blocks/SM | occupancy | PTX: mma, ldmatrix, cp.async, wgmma, tma, "
             "try_wait | SASS: HMMA, LDSM, LDGSTS, HGMMA, UTMALDG, SYNCS |", "|" + "---|" * 13]
    for r in rows:
        occ = (f"{r['blocks']} | {r['occ']:.0%}" if r["threads"] and r["blocks"] is not None
               else "- | -")
        lines.append(
            f"| {r['step']} | `{r['kernel']}` | {r['arch']} | {r['regs']} | "
            f"{r.get('setmaxnreg') or '-'} | {r['spill_st']}/"
            f"{r['spill_ld']} | {r['stack']} | {r['threads'] or '-'} | "
            f"{r['smem_static'] + r['smem_dyn']} | {occ} | {counts(r['ptx'])} | "
            f"{counts(r['sass'])} |")
    table = "\n".join(lines)
    # A loop whose hot path the analysis could not follow to its back edge has no tensor
    # instructions on it: reported by name, never as a zero.
    unfollowed = [r for r in rows if r.get("loop") and not r["loop"]["tensor"]]
    for r in unfollowed:
        print(f"kernel_report: {r['step']} {r['kernel']} on {r['arch']}: the main loop's hot path "
              "could not be followed (scripts/mainloop_report.py)", file=sys.stderr)
    loops = [r for r in rows if r.get("loop") and r["loop"]["tensor"]]
    loop_table = mainloop_table(loops)
    if args.save_mainloop:
        with open(args.save_mainloop, "w") as f:
            json.dump({f"{r['step']} {r['kernel']} {r['arch']}": {**r["loop"], "regs": r["regs"]}
                       for r in loops}, f, indent=1, sort_keys=True)
            f.write("\n")
    toolkit = toolkit_version(args.build)
    for chapter, check in [(c, False) for c in args.rungs_chapter] + \
                          [(c, True) for c in args.check_rungs_chapter]:
        step = os.path.basename(os.path.dirname(os.path.abspath(chapter)))
        if step not in LADDERS:
            print(f"kernel_report: {chapter}: {step} has no ladder", file=sys.stderr)
            return 2
        text = open(chapter).read()
        if check:
            m = re.search(r"rungs-static:begin -->\n.*?\(nvcc ([^,]+),", text)
            if not m or m.group(1) != toolkit:
                print(f"kernel_report: skipped: {chapter}'s ladder table was made with nvcc "
                      f"{m.group(1) if m else '?'}, this build uses {toolkit}")
                return 77
        table = (backward_rung_table if step == "step6_backward" else rung_table)(step, rows, toolkit)
        new = replaced(text, "rungs-static", table, chapter)
        if step in PAIR_TABLES:
            new = replaced(new, PAIR_TABLES[step][0], pair_table(step, rows, toolkit), chapter)
        if check and new != text:
            print(f"kernel_report: {chapter}: the ladder's table differs from this build; run "
                  f"scripts/kernel_report.py --rungs-chapter {chapter}", file=sys.stderr)
            return 1
        if not check and new != text:
            open(chapter, "w").write(new)
            print(f"kernel_report: rewrote the ladder's table in {chapter}")
    if args.chapter:
        if not args.baseline:
            print("kernel_report: --chapter needs --baseline", file=sys.stderr)
            return 2
        status = rewrite_chapter(args.chapter, args.baseline, loops)
        if status:
            return status
    if args.out:
        archs = sorted({r["arch"] for r in rows}, key=lambda a: (int(re.sub(r"\D", "", a)), a))
        archs_text = ", ".join(archs[:-1]) + " and " + archs[-1] if len(archs) > 1 else archs[0]
        listed = ["sm_" + a for a in current_default().split(";")]
        which = ("CMakeLists.txt's full list, `ATTN_CUDA_ARCHITECTURES=all scripts/build.sh` as CI "
                 "builds it" if sorted(listed) == sorted(archs) else "this build's list")
        tool = ("cuobjdump + nvdisasm from PyPI" if have_sass else
                "cuobjdump (no nvdisasm: no SASS)" if cuobjdump else "no cuobjdump: no PTX/SASS")
        with open(args.out, "w") as f:
            f.write(
                "# Kernel report\n\n"
                "Generated by `scripts/kernel_report.py --out docs/kernel_report.md` from a build "
                f"of every step for\n{archs_text} ({which}; steps 4 "
                "and 5 from sm_80 on, the rungs for their step's lowest alone:\nsee docs/gpus.md); "
                "nothing here ran on a GPU.\n\n"
                "- regs, spills, stack: ptxas `--resource-usage` of the build.\n"
                "- threads, smem/block: the launch, as the CPU backend logged it "
                "(`SIMT_LOG_LAUNCHES`); smem is static + dynamic.\n"
                "- blocks/SM and occupancy: computed from those and the per-SM limits of each "
                "architecture\n  (registers, threads, blocks, shared memory with 1 KB reserved "
                "per block from sm_80 on; the limits of sm_75 and sm_120 as CCCL's\n  "
                "cuda/__device/arch_traits.h states them); occupancy = resident warps / maximum warps.\n"
                f"- instructions: counted in the PTX and SASS of the objects ({tool}).\n"
                "- setmaxnreg: the register counts a warp-specialised kernel moves to "
                "(`dec` for the producer,\n  `inc` for the consumers); regs is then the count "
                "at entry.\n\n"
                + table + "\n\n"
                "## Main loop of the tensor-core kernels\n\n"
                "One iteration of the hot path of each kernel's main loop in SASS, per warp "
                "(scripts/mainloop_report.py:\nthe natural loop with the most tensor instructions; "
                "the path through it with the most tensor\ninstructions, LDSM, async copies and "
                "exponentials (MUFU.EX2), then the fewest instructions in all). Categories: tensor = HMMA/HGMMA,\n"
                "copy = LDGSTS/UTMALDG, fp32 = FP32 arithmetic, compares and F2FP packs, "
                "int = integer and uniform\narithmetic, pred = PLOP3/P2R/R2P, move = MOV/IMAD.MOV/"
                "CS2R/S2R, barrier = BAR/DEPBAR/LDGDEPBAR,\nother = shuffles, loads, stores, "
                "conversions. instr/mma = total / tensor. An inner loop is counted once.\n"
                "For a wgmma kernel (HGMMA), per 4096 FLOPs counts an HGMMA 64 x N x 16 as N / 8 "
                "m16n8k16s per warp, except the 64 x 8 x 16 row-sum products (P times ones), which "
                "count as instructions but not as FLOPs.\n"
                "Causal problems and the last, partial tile run the kernel's other loop (the masked "
                "tiles, one\ntile per iteration): its instructions per mma are the last column.\n"
                "The `true` instantiations are the dropout kernels (the Philox loop is their inner "
                "loop).\nstep4's last template argument names its tile configuration "
                "(step4_tensorcore/configs.h: Br query rows\nper block, Bc keys per tile, warps, "
                "pipeline stages); the budget test holds the default, br64_bc64_w4_s2.\n\n"
                + loop_table + "\n")
    else:
        print(table)
        print()
        print(loop_table)

    status = 0
    for r in rows:
        if split_rung(r["step"])[0] in args.no_serialized_wgmma and r["serialized"]:
            print(f"kernel_report: {r['step']} {r['kernel']} on {r['arch']}: ptxas serialised its "
                  f"wgmmas (C7514: {r['serialized']})", file=sys.stderr)
            status = 1
        if split_rung(r["step"])[0] in args.fits and r.get("blocks") == 0:
            print(f"kernel_report: {r['step']} {r['kernel']} on {r['arch']} cannot launch there: "
                  f"{r['smem_static'] + r['smem_dyn']} B of shared memory and {r['regs']} "
                  f"registers x {r['threads']} threads leave an SM room for no block",
                  file=sys.stderr)
            status = 1
        if r["step"] in args.no_spills and (r["spill_st"] or r["spill_ld"] or r["stack"]):
            print(f"kernel_report: {r['step']} {r['kernel']} on {r['arch']} spills "
                  f"({r['spill_st']} B stored, {r['spill_ld']} B loaded, {r['stack']} B stack)",
                  file=sys.stderr)
            status = 1
        if any(r["step"] == s and k in (None, base_and_dim(r["kernel"])[0])
               for s, k in tensor_core):
            if not cuobjdump or not have_sass:
                print("kernel_report: cuobjdump/nvdisasm not found: run scripts/setup.sh --python",
                      file=sys.stderr)
                return 1
            have = {**r["ptx"], **r["sass"]}
            missing = [op for op in (HOPPER_OPS if is_hopper(r) else TENSOR_CORE_OPS)
                       if have.get(op, 0) == 0]
            if missing:
                print(f"kernel_report: {r['step']} {r['kernel']} on {r['arch']} lacks "
                      f"{', '.join(missing)}", file=sys.stderr)
                status = 1
    for r in rows:
        for rx, n in r.get("ptx_required", {}).items():
            if n == 0:
                print(f"kernel_report: {r['step']} {r['kernel']} on {r['arch']}: no /{rx}/ in "
                      "its PTX", file=sys.stderr)
                status = 1
    for step, _, rx in required_ptx:
        if not any(r["step"] == step and r.get("ptx_required") for r in rows):
            print(f"kernel_report: --require-ptx {step}: no PTX of {step} (cuobjdump missing?)",
                  file=sys.stderr)
            status = 1
    status = max(status, check_archs(args.require_archs, rows))
    status = max(status, check_budgets(args.budget, rows))
    compared = [] if args.compare_chapter else None
    status = max(status, check_compare(args.compare, rows, compared))
    if args.compare_chapter:
        status = max(status, rewrite_between(args.compare_chapter, "compare", [
            "| kernel | arch | instructions per iteration | tensor FLOPs per iteration / 4096 | "
            "per 4096 FLOPs | step it is compared with, per 4096 FLOPs | ratio | at most |",
            "|" + "---|" * 8] + compared))
    for s, k in [(s, None) for s in args.no_spills] + tensor_core:
        if not any(r["step"] == s and k in (None, base_and_dim(r["kernel"])[0]) for r in rows):
            print(f"kernel_report: no kernels found for {s}{'/' + k if k else ''}",
                  file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
