#!/usr/bin/env python3
"""The Python half of the GPU run (scripts/gpu_run.sh; docs/gpus.md): the shapes it times, the
Nsight Compute stage and its table beside the CPU backend's counts, and the report it leaves.

    gpu_report.py shapes ladder|fa                       the shapes files' lines
    gpu_report.py ncu BUNDLE OUT.csv --budget S --suite ATTN_SUITE [--rehearse]
    gpu_report.py summary BUNDLE OUTDIR WORKDIR [--no-chart]   README.md, run.json, chart.png
    gpu_report.py readme README.md [--details docs/gpus.md] [RESULTS_DIR ...]
                                                         the README's GPU results block
    gpu_report.py chapters RESULTS_DIR [--check]         each chapter's GPU table (<!-- gpu -->)
    gpu_report.py chart RESULTS_DIR                      its chart.png drawn again from its
                                                         timings.csv, titled as its run.json

The README's block and the chapters' tables mark each kernel whose source has changed since the
run measured it (scripts/kernel_sources.py: the hashes the run's bundle recorded, beside today's).

It runs with the GPU machine's own Python: the standard library, and matplotlib for the chart
where it is installed (the chart is left out, with a note, where it is not).
"""
import csv
import datetime
import importlib.util
import json
import os
import re
import subprocess
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (the FlashAttention grid and the FLOP count)
import kernel_sources  # noqa: E402  (which source each figure measured)
import markers  # noqa: E402


def _script(name):
    """A sibling script as a module, by its path (profile.py's name is also the standard
    library's)."""
    spec = importlib.util.spec_from_file_location(f"attn_{name}", os.path.join(HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

# The shapes every step and rung is timed on: seed 004's (target: under 5 us on an H100) and a
# long one with D = 128.
LADDER_SHAPES = ["--batch 1 --heads 8 --seq 512 --dim 64 --dtype fp16",
                 "--batch 1 --heads 16 --seq 4096 --dim 128 --dtype fp16"]

# The small shape every kernel is profiled at, by ncu on the GPU and by its counted copy on the
# CPU backend (gpu_bundle.sh): two query tiles of 64 rows per head.
NCU_SHAPE = "--batch 1 --heads 2 --seq 128 --dim 64 --dtype fp16"

# What the CPU backend counts and the Nsight Compute metrics that measure the same (profile.py),
# and what ncu measures beside them that the backend cannot count (ptxas's HFMA2.MMA).
COUNTERS = _script("profile").COUNTED
NCU_ONLY = _script("profile").NCU_ONLY
# A kernel's time alone, as ncu measures it (one run, caches flushed, clocks as found).
DURATION = "gpu__time_duration.sum"
# Why step 5's sm90a kernel falls short of SDPA at short sequences: its warps' stall reasons and
# its issue rate at the grid's shortest causal shape, B=32 H=32 S=512 D=64 (ncu's per-reason
# counters of warps stalled, summed over the kernel's cycles; "selected" is a warp issuing).
STALL_KERNELS = ["step5_warpspecialized[sm90a]"]
STALL_SHAPE = "--batch 32 --heads 32 --seq 512 --dim 64 --dtype fp16 --causal"
STALL_REASONS = ["barrier", "branch_resolving", "dispatch_stall", "drain", "gmma", "imc_miss",
                 "lg_throttle", "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle",
                 "misc", "no_instruction", "not_selected", "selected", "short_scoreboard",
                 "sleeping", "tex_throttle", "wait"]
STALLS = ([(f"stall_{r}", [f"smsp__warps_issue_stalled_{r}.sum"]) for r in STALL_REASONS]
          + [("issue_active", ["smsp__issue_active.sum"]),
             ("cycles_active", ["smsp__cycles_active.sum"]),
             ("inst_executed", ["smsp__inst_executed.sum"])])
SANITIZERS = ["memcheck", "racecheck", "synccheck", "initcheck"]
# The README's picture until a GPU has run the kernels (scripts/chart.py draws it).
COUNTED_CHART = "docs/results/cpu-simt-smoke.png"


def refuse(message):
    markers.refuse(f"gpu_report: {message}")


def read_csv(path):
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def suite_kernels(suite, sets):
    """(label, step, flags) of each kernel, from attn_suite (the bundle's, or gpu_run's wrapper)."""
    out = subprocess.run([suite, "list", "--kernels", sets], capture_output=True, text=True,
                         check=True).stdout
    return [tuple((line.split("\t") + ["", ""])[:3]) for line in out.splitlines() if line]


# ---- shapes ----------------------------------------------------------------------------------

def shapes(which):
    if which == "ladder":
        return LADDER_SHAPES
    if which != "fa":
        refuse(f"shapes {which}: ladder or fa")
    lines = []
    for dtype in ("fp16", "bf16"):
        for s in bench.grid("fa"):
            lines.append(f"--batch {s['batch']} --heads {s['heads']} --seq {s['seqlen_q']} "
                         f"--dim {s['dim']} --dtype {dtype}" + (" --causal" if s["causal"] else ""))
    return lines


# ---- the Nsight Compute stage -------------------------------------------------------------------

def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse_ncu(text):
    """{metric: value summed over the launches, "launches": how many} from ncu's --csv output
    (one row per launch and metric: "ID", ..., "Metric Name", "Metric Unit", "Metric Value"; or
    --page raw's one row per launch with a column per metric), or None when it holds none."""
    lines = [line for line in text.splitlines() if not line.startswith("==")]
    start = next((i for i, line in enumerate(lines) if line.startswith(('"ID"', "ID,"))), None)
    if start is None:
        return None
    rows = list(csv.reader(lines[start:]))
    header, sums, launches = rows[0], {}, set()
    if "Metric Name" in header and "Metric Value" in header:
        name, value = header.index("Metric Name"), header.index("Metric Value")
        for r in rows[1:]:
            x = number(r[value]) if len(r) > max(name, value) else None
            if x is not None:
                launches.add(r[0])
                sums[r[name]] = sums.get(r[name], 0.0) + x
    else:
        for r in rows[1:]:
            if not r or not r[0].strip().isdigit():
                continue  # the units row
            launches.add(r[0])
            for metric, value in zip(header, r):
                x = number(value)
                if x is not None and metric != "ID":
                    sums[metric] = sums.get(metric, 0.0) + x
    return {"launches": len(launches), **sums}


def run_ncu(suite, step, flags, shape, metrics, timeout, workdir):
    """One kernel's run under ncu: (sums or None, the error)."""
    log = os.path.join(workdir, "ncu.csv")
    if os.path.exists(log):
        os.remove(log)
    cmd = ["ncu", "--csv", "--print-units", "base", "--clock-control", "none",
           "--log-file", log, "--metrics", ",".join(metrics), suite, "run", step] + \
        flags.split() + ["--backend", "gpu", "--iters", "0", "--warmup", "0", "--no-check"] + \
        shape.split()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"ncu took over {timeout:.0f} s"
    except OSError as e:
        return None, f"ncu cannot run here ({e.strerror})"
    text = open(log).read() if os.path.exists(log) else ""
    sums = parse_ncu(text)
    if p.returncode != 0 or sums is None:
        lines = [line for line in (text + p.stderr + p.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if "ERROR" in line]
        return None, "\n".join(errors or lines[-1:]) or f"ncu exited {p.returncode}"
    return sums, ""


def ncu_jobs(suite):
    """What the stage profiles, in order: each step's own kernel at NCU_SHAPE (the metrics COUNTERS
    and NCU_ONLY name, and its duration), then at seed 004's shape (its duration alone), then step
    5's sm90a kernel at STALL_SHAPE (its warps' stall reasons and issue rate), then every rung at
    NCU_SHAPE: the budget reaches the steps first. Each job: (label, step, flags, shape, what it
    records: [(counter, [metrics])])."""
    counted = COUNTERS + NCU_ONLY + [("gpu_time_ns", [DURATION])]
    timed = [("gpu_time_ns", [DURATION])]
    steps, rungs = suite_kernels(suite, "steps"), suite_kernels(suite, "rungs")
    return ([(label, step, flags, NCU_SHAPE, counted) for label, step, flags in steps]
            + [(label, step, flags, LADDER_SHAPES[0], timed) for label, step, flags in steps]
            + [(label, step, flags, STALL_SHAPE, STALLS + timed) for label, step, flags in steps
               if label in STALL_KERNELS]
            + [(label, step, flags, NCU_SHAPE, counted) for label, step, flags in rungs])


def ncu_stage(suite, bundle, out_csv, budget, rehearse):
    start = time.monotonic()
    cpu = {r["step"]: r for r in read_csv(os.path.join(bundle, "share", "cpu_counts.csv"))}
    workdir = tempfile.mkdtemp(prefix="gpu_report_ncu_")  # ncu's log: not one of OUTDIR's files
    rows, dropped, reached, left = [], set(), 0, []
    cpu_counted = {name for name, _ in COUNTERS}
    for label, step, flags, shape, records in ncu_jobs(suite):
        metrics = [m for _, ms in records for m in ms if m not in dropped]
        ncu, why = None, "skipped: no GPU (rehearsal)" if rehearse else ""
        remaining = budget - (time.monotonic() - start)
        if not rehearse and remaining < 2:
            left.append(f"{label} at {shape}")
            why = "not measured: the stage's budget was spent"
        elif not rehearse:
            while True:  # an ncu without a metric names it: left out, and the kernel run again
                ncu, err = run_ncu(suite, step, flags, shape, metrics, min(remaining, 25), workdir)
                missing = re.search(r"[Ff]ailed to find metric ([\w.]+)", err)
                if ncu is not None or not missing or missing.group(1) not in metrics:
                    break
                metrics.remove(missing.group(1))
                dropped.add(missing.group(1))
            reached += ncu is not None
            why = "" if ncu is not None else "ncu failed: " + err.replace("\n", " / ")
            print(f"ncu: {label} at {shape}: " +
                  (f"{int(ncu['launches'])} launches" if ncu else why), flush=True)
        counted = cpu.get(label) if shape == NCU_SHAPE else None
        for name, ms in records:
            have = ncu is not None and all(m in ncu for m in ms)
            note = why if ncu is None else "" if have else "this ncu has no such metric"
            if name == "gpu_time_ns":
                note = note or "the kernels' time alone, one run, caches flushed (not counted)"
            elif name not in cpu_counted:
                note = note or "ncu's alone: the CPU backend does not count it"
            elif not counted:
                note = note or "no CPU count (the bundle's build had no counted copies)"
            rows.append({"kernel": label, "shape": shape, "counter": name,
                         "ncu_metrics": "+".join(ms),
                         "cpu": counted.get(name, "") if counted and name in cpu_counted else "",
                         "ncu": f"{sum(ncu[m] for m in ms):.0f}" if have else "", "note": note})
    shutil.rmtree(workdir, ignore_errors=True)
    with open(out_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["kernel"],
                           lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"ncu: {reached} runs measured" + (f", {len(left)} left at the budget" if left else "")
          + (f"; metrics this ncu lacks: {', '.join(sorted(dropped))}" if dropped else "")
          + f"; {out_csv}")
    if rehearse:
        return 0
    return 1 if reached == 0 else 3 if left else 0


# ---- the summary ---------------------------------------------------------------------------------

def fmt(v, digits=3):
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def stage_table(stages):
    return table(["stage", "limit (s)", "took (s)", "status"],
                 [[s["name"], s["limit_s"], s["took_s"], s["status"]] for s in stages])


def check_section(rows):
    if not rows:
        return "No correctness results (the stage did not run or wrote nothing).", {}
    per = {}
    for r in rows:
        k = per.setdefault(r["kernel"], {"pass": 0, "fail": 0, "skipped": 0, "first": ""})
        k[r["status"]] = k.get(r["status"], 0) + 1
        if r["status"] == "fail" and not k["first"]:
            k["first"] = f"{r['case']}: {r['detail']}"
    backend = rows[0]["backend"]
    body = table(["kernel", "passed", "failed", "skipped", "first failure"],
                 [[k, v["pass"], v["fail"], v["skipped"], v["first"] or "-"]
                  for k, v in per.items()])
    totals = {s: sum(v[s] for v in per.values()) for s in ("pass", "fail", "skipped")}
    head = (f"Backend {backend}; fresh inputs, each case's seed in check.csv: {len(per)} kernels, "
            f"{totals['pass']} runs passed, {totals['fail']} failed, {totals['skipped']} skipped "
            "(a head dim the kernel is not built for, or a GPU it cannot run on).")
    return head + "\n\n" + body, totals


def sanitize_section(path):
    """Per tool: its summary line, the kernels the suite reached, and the functions its reports
    name (the frame after each report's "at", a kernel's qualified name: step4::rung3::gpu::...)."""
    if not os.path.exists(path):
        return "Not run.", {}
    text = open(path).read()
    out, result = [], {}
    for tool in SANITIZERS:
        part = text.split(f"### {tool}\n", 1)
        if len(part) < 2:
            continue
        body = part[1].split("\n### ", 1)[0]
        if body.strip().startswith("skipped"):
            out.append([tool, body.strip(), "-", "-"])
            result[tool] = "skipped"
            continue
        summary = re.findall(r"========= (?:ERROR|RACECHECK|LEAK) SUMMARY: .*", body)
        named = sorted({m.split("<")[0].split("(")[0].split()[-1] for m in
                        re.findall(r"========= .*?\bat (?:0x[0-9a-f]+ in )?([A-Za-z_][\w:<>, ]*)",
                                   body) if "::" in m})
        reached = re.findall(r"^(?:PASS|FAIL|SKIP) (.+?): ", body, re.M)
        out.append([tool, summary[-1].replace("========= ", "") if summary else
                    "no summary (stopped at its limit?)", len(reached), ", ".join(named) or "none"])
        result[tool] = {"summary": summary[-1] if summary else "", "reached": len(reached),
                        "named": named}
    return table(["tool", "summary", "kernels reached", "functions its reports name"], out), result


def compulsory_bytes(r):
    b, h, hk = int(r["batch"]), int(r["heads"]), int(r["heads_kv"] or r["heads"])
    sq, sk, d = int(r["seqlen_q"]), int(r["seqlen_k"]), int(r["dim"])
    return 2 * (2 * b * h * sq * d + 2 * b * hk * sk * d) + 4 * b * h * sq


def shape_of(r):
    return (f"{r['dtype']} B={r['batch']} H={r['heads']} S={r['seqlen_q']} D={r['dim']}"
            + (" causal" if r["causal"] == "1" else ""))


def ladder_shape(r):
    """A timings row's shape as LADDER_SHAPES writes it."""
    return (f"--batch {r['batch']} --heads {r['heads']} --seq {r['seqlen_q']} --dim {r['dim']} "
            f"--dtype {r['dtype']}")


def is_ladder(r):
    return ladder_shape(r) in LADDER_SHAPES and r["causal"] == "0"


def timing_section(rows, peaks):
    """Every forward kernel at the ladder's shapes (time, TFLOPS, the two shares), then the grid's
    TFLOPS with a column per kernel, one table per dtype (the backward's: backward_section)."""
    rows = [r for r in rows if not bench.is_backward(r)]
    if not rows:
        return "No timings (the stage did not run or wrote nothing)."
    mm, bw = peaks.get("bf16_matmul"), peaks.get("copy_bandwidth")
    head = ("Each row's share of this GPU's bf16 matrix-product rate "
            f"({fmt(mm) if mm else '?'} TFLOP/s, measured in this run) is its TFLOPS over that "
            "rate; its share of the device-to-device copy bandwidth "
            f"({fmt(bw) if bw else '?'} TB/s, bytes read plus written) is the bytes it must move "
            "at least (Q, K, V read once, O and LSE written once) over its time, over that "
            "bandwidth.")

    def cells(r):
        t, tf = float(r["time_ms"]), float(r["tflops"])
        return [f"{1e3 * t:.4g}", f"{tf:.1f}", f"{100 * tf / mm:.0f}%" if mm else "-",
                f"{100 * compulsory_bytes(r) / (t * 1e-3) / 1e12 / bw:.0f}%" if bw else "-"]
    ladder = [r for r in rows if is_ladder(r)]
    shapes = list(dict.fromkeys(shape_of(r) for r in ladder))
    kernels = list(dict.fromkeys(r["step"] + (f" {r['config']}" if r["config"] and "[" not in
                                              r["step"] else "") for r in ladder))
    by = {(shape_of(r), r["step"] + (f" {r['config']}" if r["config"] and "[" not in r["step"]
                                     else "")): r for r in ladder}
    out = [head]
    for shape in shapes:
        out.append(f"**{shape}**\n\n" + table(
            ["kernel", "us", "TFLOPS", "of bf16 matmul", "of copy bandwidth"],
            [[k] + cells(by[(shape, k)]) for k in kernels if (shape, k) in by]))
    grid = [r for r in rows if not is_ladder(r)]
    for dtype in ("fp16", "bf16"):
        mine = [r for r in grid if r["dtype"] == dtype]
        if not mine:
            continue
        names = list(dict.fromkeys(r["step"] for r in mine))
        cell = {(shape_of(r), r["step"]): f"{float(r['tflops']):.0f}" for r in mine}
        out.append(f"**The FlashAttention grid, {dtype}, TFLOPS** (16k tokens a batch, H = 2048 / "
                   "D; empty: left out, a run predicted over 40 ms, or not available)\n\n"
                   + table(["shape"] + names,
                           [[sh] + [cell.get((sh, n), "") for n in names]
                            for sh in dict.fromkeys(shape_of(r) for r in mine)]))
    return "\n\n".join(out)


def backward_section(rows, mm):
    """The backward pass at the ladder's shapes: step 6's own kernel and its rungs in the ladder's
    order, then SDPA's backends' backward, each row's time, TFLOPS and share of the bf16 rate."""
    ladder = [r for r in rows if is_ladder(r) and bench.is_backward(r)]
    if not ladder:
        return "**The backward pass**: no timings (the stage ran out before them, or is older)."
    ladders = _script("ladders")
    order = [ladders.run_name("step6_backward", rung)  # the rungs, the step's own kernel last
             for rung, _ in ladders.LADDERS["step6_backward"]]
    seen = list(dict.fromkeys(r["step"] for r in ladder))
    names = sorted(seen, key=lambda n: (order.index(n) if n in order else len(order),
                                        seen.index(n)))
    by = {(shape_of(r), r["step"]): r for r in ladder}
    out = ["**The backward pass** (dQ, dK, dV from dO and the forward's O and LSE; FLOPs 2.5 "
           "times the forward's, FlashAttention's convention; SDPA's backends timed on their own "
           "backward, the forward run before)"]
    for shape in dict.fromkeys(shape_of(r) for r in ladder):
        cells = []
        for n in names:
            r = by.get((shape, n))
            if r:
                tf = float(r["tflops"])
                cells.append([n, f"{1e3 * float(r['time_ms']):.4g}", f"{tf:.1f}",
                              f"{100 * tf / mm:.0f}%" if mm else "-"])
        out.append(f"**{shape}, backward**\n\n" + table(["kernel", "us", "TFLOPS",
                                                         "of bf16 matmul"], cells))
    return "\n\n".join(out)


# How Nsight Compute counts what the CPU backend counts apart, each rule read off the H200 run's
# counters (docs/results/h200, where ncu's own figure equals the sum exactly). Its l1tex__ metrics
# of global and shared loads count cp.async (LDGSTS) and ldmatrix (LDSM) among them, and its hmma
# metric counts ptxas's HFMA2.MMA (register moves on the tensor pipe) and the warps' HGMMA.
#
# Where ncu measured such a part apart (profile.py's sm__sass_ metrics and NCU_ONLY): ncu's figure
# less that part is set beside the CPU's own count. counter -> (the part's counter, the note).
NCU_APART = {
    "gld_requests": ("ldgsts_requests", "ncu's global loads include cp.async (LDGSTS), which it "
                     "measured apart: its figure less those"),
    "gld_sectors": ("ldgsts_sectors", "ncu's global loads include cp.async (LDGSTS), which it "
                    "measured apart: its figure less those"),
    "lds_wavefronts": ("ldsm_wavefronts", "ncu's shared loads include ldmatrix (LDSM), which it "
                       "measured apart: its figure less those"),
    "lds_conflicts": ("ldsm_conflicts", "ncu's shared loads include ldmatrix (LDSM), which it "
                      "measured apart: its figure less those"),
    "mma": ("hfma2_mma", "ncu's HMMA count includes ptxas's HFMA2.MMA, which it measured apart: "
            "its figure less those"),
}
# The CPU's side: the sum of these counters, each times its factor, is set beside one ncu metric.
# A rule that names a part (the third field) is the older one, for a run whose ncu did not measure
# that part apart (docs/results/h200's: the metric names profile.py asked for did not exist), and
# its note says so; the others always apply. counter -> (terms, the part or None, why).
AS_NCU_COUNTS = {
    "gld_requests": ([("gld_requests", 1), ("ldgsts_requests", 1)], "ldgsts_requests",
                     "ncu counts cp.async (LDGSTS) among global loads"),
    "gld_sectors": ([("gld_sectors", 1), ("ldgsts_sectors", 1)], "ldgsts_sectors",
                    "ncu counts cp.async (LDGSTS) among global loads"),
    "lds_wavefronts": ([("lds_wavefronts", 1), ("ldsm_wavefronts", 1)], "ldsm_wavefronts",
                       "ncu counts ldmatrix (LDSM) among shared loads"),
    "lds_conflicts": ([("lds_conflicts", 1), ("ldsm_conflicts", 1)], "ldsm_conflicts",
                      "ncu counts ldmatrix (LDSM) among shared loads"),
    # A wgmma is one instruction of a warpgroup, which each of its 4 warps issues; ncu counts warps.
    "wgmma": ([("wgmma", 4)], None, "ncu counts each of the warpgroup's 4 warps"),
    # The tensor pipe's HMMA metric counts those warps' HGMMA too.
    "mma": ([("mma", 1), ("wgmma", 4)], None, "ncu's HMMA count includes HGMMA"),
}
OLDER = "the older rule: this run's ncu did not measure {} apart"


def compare_counts(rows):
    """counters.csv's rows of one kernel at NCU_SHAPE, each ncu figure beside the CPU figure it
    measures: dicts with the counter, the two figures compared ("cpu", "ncu": numbers or None), how
    each is made ("cpu_shown", "ncu_shown"), "rule" (whether a rule changed either side), "note"."""
    by = {r["counter"]: r for r in rows}

    def measured(counter):
        return counter in by and by[counter]["ncu"] != ""
    out = []
    for r in rows:
        name, cpu, ncu, note = r["counter"], r["cpu"], r["ncu"], r["note"] or ""
        if name == "gpu_time_ns" or (cpu in ("", "0") and ncu in ("", "0")):
            continue
        c = {"counter": name, "cpu": float(cpu) if cpu else None, "cpu_shown": cpu or "-",
             "ncu": float(ncu) if ncu else None, "ncu_shown": ncu or "-", "rule": False}
        notes = [note] if note else []
        if name in {n for n, _ in NCU_ONLY} and ncu:
            notes = ["ncu's alone: ptxas's code, which the CPU backend (running the source) "
                     "does not have"]
        into = [k for k, (_, m, _) in AS_NCU_COUNTS.items() if m == name and k in by]
        if into and not ncu and note == "this ncu has no such metric":
            notes = [f"this ncu has no such metric: it counts these in {into[0]}"]
        # ncu's side: less the part it measured apart
        part, why_apart = NCU_APART.get(name, (None, ""))
        if ncu and part and measured(part):
            c["ncu"] = float(ncu) - float(by[part]["ncu"])
            c["ncu_shown"] = f"{c['ncu']:.0f} ({name} {ncu} - {part} {by[part]['ncu']})"
            c["rule"] = True
            notes.append(why_apart)
        # the CPU's side: a sum where ncu counts what the CPU counts apart
        terms_of, lacking, why = AS_NCU_COUNTS.get(name, ([], None, ""))
        terms = [(t, f, by[t]["cpu"]) for t, f in terms_of
                 if t in by and by[t]["cpu"] not in ("", "0")]
        if (ncu and terms and terms != [(name, 1, cpu)]
                and (lacking is None or not measured(lacking))):
            c["cpu"] = sum(f * float(v) for _, f, v in terms)
            c["cpu_shown"] = f"{c['cpu']:.0f} (" + " + ".join(
                f"{t} {v}" + (f" x {f}" if f != 1 else "") for t, f, v in terms) + ")"
            c["rule"] = True
            notes.append(why + ("" if lacking is None else f" ({OLDER.format(lacking)})"))
        compared, got = c["cpu"], c["ncu"]
        if got is not None and compared is not None and got != compared:
            if name == "mma" and got > compared and not measured("hfma2_mma"):
                notes.append("ptxas's HFMA2.MMA (register moves it runs on the tensor pipe) are "
                             f"in ncu's count ({OLDER.format('hfma2_mma')})")
            elif name == "lds_wavefronts" and got < compared:
                notes.append("nvcc merged the source's adjacent loads into wider ones (LDS.64); "
                             "the CPU counts the source's")
            elif name == "lds_conflicts" and got > compared and \
                    got < 1e-3 * float(by.get("lds_wavefronts", {}).get("ncu") or "inf"):
                notes.append("a handful beside the wavefronts, another handful in the next run: "
                             "the L1's arbitration with other traffic, not the access pattern")
            elif name == "dram_bytes_min" and got < compared:
                notes.append("writes still in L2 when the kernel ended are not yet DRAM bytes")
        c["note"] = "; ".join(n for n in notes if n)
        out.append(c)
    return out


def as_ncu_counts(rows):
    """counters.csv's rows of one kernel, with the CPU figure each ncu metric measures: [counter,
    cpu as ncu counts it (a string showing the sum), ncu (a string showing a difference), ncu / CPU,
    note]."""
    return [[c["counter"], c["cpu_shown"], c["ncu_shown"],
             f"{c['ncu'] / c['cpu']:.2f}" if c["ncu"] is not None and c["cpu"] else "-",
             c["note"]] for c in compare_counts(rows)]


def agreement(rows):
    """One sentence: how many of the figures both counted agree, as counted or after a rule, and
    where the rest differ, from counters.csv's rows (every kernel at NCU_SHAPE)."""
    compared = []
    for k in dict.fromkeys(r["kernel"] for r in rows if r["shape"] == NCU_SHAPE):
        compared += [dict(c, kernel=k) for c in compare_counts(
            [r for r in rows if r["kernel"] == k and r["shape"] == NCU_SHAPE])
            if c["cpu"] is not None and c["ncu"] is not None]
    if not compared:
        return "Nsight Compute and the CPU backend counted nothing in common in this run."
    same = [c for c in compared if c["cpu"] == c["ncu"]]
    ruled = sum(c["rule"] for c in same)
    rest = {}
    for c in compared:
        if c["cpu"] != c["ncu"]:
            rest.setdefault(c["counter"], []).append(c)
    parts = []
    for counter, cs in sorted(rest.items(), key=lambda kv: -len(kv[1])):
        ratios = [c["ncu"] / c["cpu"] for c in cs if c["cpu"]]
        zero = sum(1 for c in cs if not c["cpu"])
        what = [", ".join(c["kernel"] for c in cs) if len(cs) <= 6 else "",
                f"ncu / CPU {min(ratios):.2f} to {max(ratios):.2f}" if ratios else "",
                ("the CPU counts none" + (f" in {zero}" if zero < len(cs) else "")) if zero
                else ""]
        parts.append(f"{counter} in {len(cs)} kernel{'s' if len(cs) > 1 else ''} ("
                     + "; ".join(x for x in what if x) + ")")
    return (f"Of the {len(compared)} figures Nsight Compute and the CPU backend both counted "
            f"(`{NCU_SHAPE}`), {len(same)} agree exactly: {len(same) - ruled} as counted, {ruled} "
            "once a rule for how ncu counts is applied (each row's note says which)."
            + (" The others: " + "; ".join(parts) + "." if parts else ""))


def stall_section(rows):
    """The warp-stall table of the kernels stage d profiled at STALL_SHAPE, or "" where none."""
    out = []
    for k in dict.fromkeys(r["kernel"] for r in rows if r["shape"] == STALL_SHAPE):
        got = {r["counter"]: float(r["ncu"]) for r in rows
               if r["kernel"] == k and r["shape"] == STALL_SHAPE and r["ncu"]}
        stalls = sorted(((n[len("stall_"):], v) for n, v in got.items()
                         if n.startswith("stall_") and v), key=lambda nv: -nv[1])
        total, inst = sum(v for _, v in stalls), got.get("inst_executed")
        issue = (f"issuing in {100 * got['issue_active'] / got['cycles_active']:.0f}% of its "
                 "schedulers' active cycles (`smsp__issue_active` / `smsp__cycles_active`)"
                 if got.get("cycles_active") and "issue_active" in got else "issue rate not "
                 "measured")
        missing = [n[len("stall_"):] for n, _ in STALLS if n.startswith("stall_")
                   and not any(r["kernel"] == k and r["shape"] == STALL_SHAPE
                               and r["counter"] == n and r["ncu"] for r in rows)]
        head = (f"**{k}** at `{STALL_SHAPE}`: {issue}; its warps' states, summed over the "
                "cycles (`smsp__warps_issue_stalled_<reason>`; selected: issuing)"
                + (f"; not measured: {', '.join(missing)}" if missing else "") + ".")
        if not stalls:
            out.append(head + " No stall was measured.")
            continue
        out.append(head + "\n\n" + table(
            ["reason", "warp-cycles", "per instruction issued", "share"],
            [[n, f"{v:.0f}", f"{v / inst:.2f}" if inst else "-", f"{100 * v / total:.0f}%"]
             for n, v in stalls]))
    return "\n\n".join(out)


def counters_section(rows):
    if not rows:
        return "No counters table (the stage did not run)."
    if not any(r["ncu"] for r in rows):
        notes = sorted({r["note"] for r in rows if r["note"]})
        return ("Nsight Compute measured nothing (" + "; ".join(notes) + "): the CPU backend's "
                "counts alone are in counters.csv.")
    out = []
    kernels = list(dict.fromkeys(r["kernel"] for r in rows if r["shape"] == NCU_SHAPE))
    for k in kernels:
        out += [[k] + row for row in
                as_ncu_counts([r for r in rows if r["kernel"] == k and r["shape"] == NCU_SHAPE])]
    times = [[r["kernel"], r["shape"], f"{float(r['ncu']) / 1e3:.3g}" if r["ncu"] else "-",
              r["note"] if not r["ncu"] else ""] for r in rows if r["counter"] == "gpu_time_ns"]
    stalls = stall_section(rows)
    return (f"Shape `{NCU_SHAPE}`; CPU: the counted copy on the CPU backend (--counters), as "
            "Nsight Compute counts it where the two count apart (the sum shown, and why in the "
            "note); ncu: Nsight Compute's metrics named in counters.csv, summed over the run's "
            "launches (less a part it measured apart, shown). `dram_bytes_min` is a lower bound "
            "on what the kernel reads and writes: ncu's DRAM bytes may exceed it. "
            + agreement(rows) + "\n\n"
            + table(["kernel", "counter", "CPU", "ncu", "ncu / CPU", "note"], out)
            + "\n\nEach kernel's time alone (`gpu__time_duration`, one run, caches flushed, "
            "clocks as found), beside the timings' back-to-back figures, which include what the "
            "host's launches cost:\n\n" + table(["kernel", "shape", "us", "note"], times)
            + ("\n\n**Warp stalls**\n\n" + stalls if stalls else ""))


SDPA_PREFIX, REFERENCE_PREFIXES = "torch_sdpa", ("torch_sdpa", "baseline")


def course_order():
    """[(course label, the name its timings rows carry)] of every kernel of the course, in the
    course's order (scripts/stepdiff.py --list: step 1, 2.1, 2.2, 2, 3, 4.1 .. 4, 5, 5.1 ..,
    5:sm90a, 6.1 .. 6), step 0 (the CPU reference) left out."""
    stepdiff, ladders = _script("stepdiff"), _script("ladders")
    out = []
    for label, _, step, which, _ in stepdiff.course():
        if step == stepdiff.STEPS[0]:
            continue
        rungs = [r for r, _ in ladders.LADDERS.get(step, [])]
        out.append((label, ladders.run_name(step, which) if which in rungs
                    else f"{step}[{which}]" if which else step))
    return out


def chart_panels(rows):
    """What chart() draws, in its order: a panel per ladder shape for the forward, then one per
    shape for the backward where the rows hold it. Each: {"shape", "backward", "bars": [(label,
    timings name, config, TFLOPS, share of the best SDPA backend or None)] in course order (a
    kernel the course does not name last, in the rows' order), "lines": [(name, TFLOPS)] (SDPA's
    backends and cuBLAS), "best": (name, TFLOPS) of the fastest SDPA backend or None}."""
    order = course_order()
    rank = {name: i for i, (_, name) in enumerate(order)}
    course_label = {name: label for label, name in order}
    ladder = [r for r in rows if is_ladder(r)]
    place = {shape_of(r): LADDER_SHAPES.index(ladder_shape(r)) for r in ladder}
    panels = []
    for backward in (False, True):
        mine = [r for r in ladder if bench.is_backward(r) == backward]
        for shape in sorted(dict.fromkeys(shape_of(r) for r in mine), key=place.get):
            here = [r for r in mine if shape_of(r) == shape]
            refs = [r for r in here if r["step"].startswith(REFERENCE_PREFIXES)]
            sdpa = [(r["step"], float(r["tflops"])) for r in refs
                    if r["step"].startswith(SDPA_PREFIX)]
            best = max(sdpa, key=lambda nv: nv[1]) if sdpa else None
            kernels = [(i, r) for i, r in enumerate(here)
                       if not r["step"].startswith(REFERENCE_PREFIXES)]
            kernels.sort(key=lambda ir: (rank.get(ir[1]["step"], len(rank)), ir[0]))
            configs = {}
            for _, r in kernels:
                configs.setdefault(r["step"], set()).add(r["config"])
            bars = []
            for _, r in kernels:
                name, tf = r["step"], float(r["tflops"])
                label = course_label.get(name, name)
                inner = name[name.index("[") + 1:-1] if "[" in name else ""
                label += f" {inner}" if inner and inner not in label else ""
                label += f" {r['config']}" if len(configs[name]) > 1 else ""
                bars.append((label, name, r["config"], tf, tf / best[1] if best else None))
            panels.append({"shape": shape, "backward": backward, "bars": bars,
                           "lines": [(r["step"], float(r["tflops"])) for r in refs],
                           "best": best})
    return panels


def chart(rows, title, path):
    """TFLOPS of every step and rung at the ladder's shapes in course order, each bar labelled with
    its share of the best SDPA backend there, SDPA's backends and cuBLAS as lines; the backward's
    panels after the forward's where the rows hold it (chart_panels says what is drawn)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no chart: matplotlib is not installed here"
    panels = [p for p in chart_panels(rows) if p["bars"]]
    if not panels:
        return "no chart: no timings at the ladder's shapes"
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 4.2 * len(panels)), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        bars = panel["bars"]
        values = [tf for _, _, _, tf, _ in bars]
        ax.bar(range(len(bars)), values, color="#c44e52" if panel["backward"] else "#4c72b0")
        for i, (_, _, _, tf, share) in enumerate(bars):
            ax.annotate(f"{100 * share:.0f}%" if share is not None else f"{tf:.3g}", (i, tf),
                        ha="center", va="bottom", fontsize=6)
        ax.set_yscale("log")
        ax.set_xticks(range(len(bars)))
        ax.set_xticklabels([b[0] for b in bars], rotation=60, ha="right", fontsize=7)
        for i, (name, tf) in enumerate(panel["lines"]):
            ax.axhline(tf, color=f"C{i + 1}", linestyle="--", linewidth=1, label=f"{name} {tf:.0f}")
        ax.set_ylabel("TFLOPS (log)")
        best = panel["best"]
        ax.set_title(f"{panel['shape']}" + (", backward" if panel["backward"] else "")
                     + ": in course order; on each bar, "
                     + (f"its share of the best SDPA backend here ({best[0]}, {best[1]:.1f} "
                        "TFLOPS)" if best else "its TFLOPS (no SDPA backend at this shape)"),
                     fontsize=9)
        if panel["lines"]:
            ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return ""


def during_timings(text):
    """{SM clock, memory clock, power, temperature: (min, median, max)} from the samples
    gpu_run.sh takes every second of the timings (timestamp, clocks.sm, clocks.mem, power.draw,
    temperature.gpu), or {} where there are none."""
    columns = {"sm_mhz": 1, "mem_mhz": 2, "power_w": 3, "temperature_c": 4}
    samples = {k: [] for k in columns}
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        for k, i in columns.items():
            x = number(fields[i].split()[0]) if len(fields) > i and fields[i] else None
            if x is not None:
                samples[k].append(x)
    return {k: (min(v), sorted(v)[len(v) // 2], max(v)) for k, v in samples.items() if v}


def provenance(work):
    def read(name):
        p = os.path.join(work, name)
        return open(p).read().strip() if os.path.exists(p) else ""
    text = read("manifest.txt")
    manifest = dict(line.split(": ", 1) for line in text.splitlines()
                    if ": " in line and not line.startswith(" "))
    # Which source each kernel measured (the MANIFEST's sources: block, gpu_bundle.sh).
    kernels = kernel_sources.parse_manifest(text)
    return {"gpu_idle": read("nvidia-smi-before.csv"), "gpu_loaded": read("nvidia-smi-after.csv"),
            "during_timings": during_timings(read("nvidia-smi-during.csv")),
            "clock_event_reasons": read("nvidia-smi-reasons.csv"), "bundle": manifest,
            "sources": {"method": manifest.get("sources", ""), "kernels": kernels}
            if kernels else {}}


def smi_fields(text):
    """The values of `nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,
    clocks.mem,... --format=csv` (gpu_run.sh's query, in its order), or [] where there are none."""
    lines = text.splitlines()
    return [f.strip() for f in lines[1].split(",")] if len(lines) > 1 else []


def python_section(work):
    """What stage e printed: the CUDA-array tests' summary and the benchmark tables, as printed."""
    path = os.path.join(work, "python.txt")
    if not os.path.exists(path):
        return "Not run (see Stages)."
    with open(path) as f:
        lines = f.read().rstrip("\n").splitlines()
    return ("The package's tests on CUDA tensors (python/tests/test_cuda.py) and "
            "`python -m flashsteps benchmark` (CUDA events, milliseconds per call) beside SDPA's "
            "backends in the same process:\n\n```\n" + "\n".join(lines[-60:]) + "\n```")


def guarded(title, make):
    """A section of the report: make()'s text, or one line saying why it could not be written (the
    other sections are written all the same). Returns (text, the failure or "")."""
    try:
        return make(), ""
    except Exception as e:  # noqa: BLE001 - any error of the report's own code, said in one line
        why = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
        return f"Not written: the report's code failed here ({why}).", f"{title}: {why}"


def summary(bundle, outdir, work, draw_chart=True):
    """README.md and run.json from what the stages left (rewritten after each stage: what a stage
    not yet run left is simply absent); chart.png too unless draw_chart is False. Exit status 1
    when a section could not be written, which it says in its place."""
    path = os.path.join(work, "stages.jsonl")
    stages = [json.loads(line) for line in open(path)] if os.path.exists(path) else []
    prov = provenance(work)
    rehearsal = os.path.exists(os.path.join(work, "rehearsal")) or \
        any(s["status"].startswith("skipped: no GPU") for s in stages)
    peaks = {r["measure"]: float(r["value"]) for r in read_csv(os.path.join(work, "peaks.csv"))}
    timings = read_csv(os.path.join(outdir, "timings.csv"))
    manifest = prov["bundle"]
    before, after = smi_fields(prov["gpu_idle"]), smi_fields(prov["gpu_loaded"])
    gpu = before[0] if before else "no GPU (rehearsal)" if rehearsal else "GPU not read"
    commit = manifest.get("commit", "unknown")
    during = prov["during_timings"]
    clocks = (f"; SM {during['sm_mhz'][1]:.0f} MHz, memory {during['mem_mhz'][1]:.0f} MHz "
              "(medians while timing)" if "sm_mhz" in during and "mem_mhz" in during else
              f"; SM {after[2]} of {after[3]}, memory {after[4]} after the timings"
              if len(after) > 4 else "") + (f"; {before[2]} before" if len(before) > 2 else "")
    title = (f"{gpu}; driver {before[1] if len(before) > 1 else '-'}{clocks}; commit {commit}; "
             f"bundle {manifest.get('arch', '?')}, nvcc {manifest.get('toolkit', '?')}"
             + ("; REHEARSAL, no GPU" if rehearsal else ""))
    failed, results = [], {}

    def section(title, make, key=None):
        text, why = guarded(title, make)
        if why:
            failed.append(why)
        elif key:
            text, results[key] = text  # (the text, what run.json records)
        return text
    check_text = section("a. Correctness", lambda: check_section(
        read_csv(os.path.join(outdir, "check.csv"))), "check")
    san_text = section("b. compute-sanitizer", lambda: sanitize_section(
        os.path.join(outdir, "sanitize.txt")), "sanitize")
    chart_png = os.path.join(outdir, "chart.png")

    def timings_text():
        text = (f"Measured ceilings: {peaks}" if peaks else "No measured ceilings.") + "\n\n" \
            + timing_section(timings, peaks)
        note = "no chart: no timings"
        if timings and draw_chart:  # the tables are written even where the chart cannot be
            note, why = guarded("c. Timings, the chart", lambda: chart(timings, title, chart_png))
            if why:
                failed.append(why)
        elif timings:
            note = "" if os.path.exists(chart_png) else "the chart is drawn at the end of the run"
        return text + ("\n\n" + note if note else "\n\n![TFLOPS](chart.png)")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        f"# GPU run of {commit}: {gpu}",
        f"Made by `scripts/gpu_run.sh` on {date}. Bundle: {manifest.get('arch', '?')}, built by "
        f"nvcc {manifest.get('toolkit', '?')} from commit {commit}.",
        "GPU as found, before the run (`nvidia-smi --query-gpu`):\n\n```\n"
        + (prov["gpu_idle"] or "none") + "\n```\n\nwhile timing, sampled every second "
        "(min, median, max): " + (", ".join(f"{k} {v[0]:.0f} / {v[1]:.0f} / {v[2]:.0f}"
                                            for k, v in prov["during_timings"].items()) or "none")
        + "; after the timings:\n\n```\n" + (prov["gpu_loaded"] or "none")
        + "\n```\n\nClock event reasons after the timings: "
        + (prov["clock_event_reasons"] or "none") + ".",
        "## Stages\n\n" + section("Stages", lambda: stage_table(stages)),
        "## a. Correctness (check.csv)\n\n" + check_text,
        "## b. compute-sanitizer (sanitize.txt)\n\n" + san_text,
        "## c. Timings (timings.csv)\n\n" + section("c. Timings", timings_text),
        "## c. The backward pass (timings.csv)\n\n" + section(
            "c. The backward pass", lambda: backward_section(
                [r for r in timings if bench.is_backward(r)], peaks.get("bf16_matmul"))),
        "## d. Counters beside Nsight Compute (counters.csv)\n\n" + section(
            "d. Counters", lambda: counters_section(read_csv(os.path.join(outdir,
                                                                        "counters.csv")))),
        "## e. flashsteps on CUDA tensors (log.txt)\n\n" + section(
            "e. flashsteps", lambda: python_section(work)),
    ]
    with open(os.path.join(outdir, "README.md"), "w") as f:
        f.write("\n\n".join(parts) + "\n")
    with open(os.path.join(outdir, "run.json"), "w") as f:
        json.dump({"rehearsal": rehearsal, "date": date, "commit": commit, "title": title,
                   "provenance": prov, "stages": stages, "peaks": peaks,
                   "check": results.get("check", {}), "sanitize": results.get("sanitize", {}),
                   "sections_not_written": failed}, f, indent=1)
    for s in stages:
        print(f"  {s['name']:<28} {s['took_s']:>5} s of {s['limit_s']:>4}  {s['status']}")
    for why in failed:
        print(f"gpu_report: section not written: {why}", file=sys.stderr)
    return 1 if failed else 0


# ---- the README ----------------------------------------------------------------------------------

def load_run(d, allow_rehearsal=False):
    """The run.json of a GPU run's results folder; refused where it is none, or a rehearsal's."""
    try:
        with open(os.path.join(d, "run.json")) as f:
            run = json.load(f)
    except (OSError, ValueError) as e:
        refuse(f"{d}: not a GPU run's results ({e})")
    if run["rehearsal"] and not allow_rehearsal:
        refuse(f"{d}: a rehearsal's results, not a GPU's (no GPU ran them)")
    return run


# A kernel whose source has changed since the run that measured it (kernel_sources.py).
CHANGED_MARK = "\u2020"


def changed_kernels(run):
    """The labels of a run's kernels whose source (kernel_sources.py: the .cu file and the
    repository headers it includes) differs today from what the run measured; None where the run
    recorded no hashes."""
    recorded = run.get("provenance", {}).get("sources", {}).get("kernels")
    if not recorded:
        return None
    today = kernel_sources.hashes(list(recorded))
    return {label for label, h in recorded.items() if h is None or today[label] != h}


def changed_how(run):
    """How a run's kernels' sources are compared: the parenthesis of changed_note()."""
    sources = run.get("provenance", {}).get("sources", {})
    return (f"the kernel's .cu file or a repository header it includes differs from commit "
            f"{run.get('commit', '?')}'s: `scripts/kernel_sources.py`"
            + ("; the run's hashes were computed afterwards from that commit's tree, run.json "
               "says by which command" if sources.get("added_afterwards") else ""))


NO_SOURCES = ("This run recorded no hash of its kernels' sources: whether a kernel has changed "
              "since it was measured is not known.")


def changed_note(run, changed, shown):
    """The sentence under a table of the run's kernels that says what the marks mean ("" where no
    row in `shown` is marked and the run recorded its sources)."""
    if changed is None:
        return NO_SOURCES
    if not changed & set(shown):
        return ""
    return (f"{CHANGED_MARK} kernel changed since the run: its figure measured an older version "
            f"({changed_how(run)}).")


def coverage(d, run):
    """One sentence: how many kernels the run checked, sanitised, timed and set beside Nsight
    Compute, from its files."""
    checked = list(dict.fromkeys(r["kernel"] for r in read_csv(os.path.join(d, "check.csv"))))
    sanitized = {t: v.get("reached", 0) for t, v in run.get("sanitize", {}).items()
                 if isinstance(v, dict)}
    counted = list(dict.fromkeys(r["kernel"] for r in read_csv(os.path.join(d, "counters.csv"))
                                 if r["shape"] == NCU_SHAPE and r["ncu"]))
    timed = {r["step"] + (f" {r['config']}" if r["config"] else "")
             for r in read_csv(os.path.join(d, "timings.csv"))
             if not r["step"].startswith(REFERENCE_PREFIXES)}
    backward = sorted({r["step"] for r in read_csv(os.path.join(d, "timings.csv"))
                       if bench.is_backward(r) and not r["step"].startswith(SDPA_PREFIX)})
    tools = (f"{min(sanitized.values())} of them under each of compute-sanitizer's "
             f"{len(sanitized)} tools" if sanitized and len(set(sanitized.values())) == 1
             else "under compute-sanitizer: " + ", ".join(f"{t} {n}" for t, n in
                                                        sanitized.items()) if sanitized
             else "none under compute-sanitizer")
    return (f"The run's kernels: {len(checked)} checked for correctness, {tools}, "
            f"{len(counted)} beside Nsight Compute, {len(timed)} timed (each tile configuration "
            f"counted as one); the backward pass: {len(backward) or 'none'} timed "
            "(`scripts/gpu_report.py readme`, from the run's check.csv, run.json, counters.csv and "
            "timings.csv).")


def readme(path, dirs, allow_rehearsal, details=None):
    """The README's block: each run's chart and a short caption (what it measured, whether its
    kernels have changed since, where the rest is); with `details` (a Markdown file with
    <!-- gpu-run-details --> markers, docs/gpus.md), each run's coverage, its agreement with
    Nsight Compute and the kernels changed since, written there."""
    markers.check(path, "gpu-results")
    if details:
        markers.check(details, "gpu-run-details")
    runs = [(d, load_run(d, allow_rehearsal)) for d in dirs]
    if not runs:
        body = ("![The counted progression on the CPU backend: counts and a model, not GPU "
                f"performance]({COUNTED_CHART})\n\n"
                "No GPU has run these kernels yet: the picture is what the CPU backend counts "
                "([Results](#results)). `scripts/gpu_bundle.sh` and `scripts/gpu_run.sh` "
                "([docs/gpus.md](docs/gpus.md)) are the two commands that will put a GPU's "
                "results here: correctness, compute-sanitizer, timings beside PyTorch SDPA and "
                "cuBLAS, and Nsight Compute beside the CPU counts.")
        detail_body = "No GPU run is committed yet."
    else:
        parts, detail_parts = [], []
        for d, run in runs:
            rel = os.path.relpath(d, os.path.dirname(os.path.abspath(path)))
            changed = changed_kernels(run)
            recorded = list(run.get("provenance", {}).get("sources", {}).get("kernels", {}))
            short = ("whether its kernels have changed since is not recorded" if changed is None
                     else f"none of its {len(recorded)} kernels has changed since" if not changed
                     else f"all {len(recorded)} of its kernels have changed since, so every bar "
                     "measured older code" if len(changed) == len(recorded)
                     else f"{len(changed)} of its {len(recorded)} kernels have changed since "
                     "(their rows are marked)")
            gpu = run["title"].split(";")[0]
            parts.append(f"![{run['title']}]({rel}/chart.png)\n\n"
                         f"The GPU run of commit {run.get('commit', '?')[:7]} on an {gpu} "
                         f"({run['date'][:10]}): every step and rung in course order, each bar "
                         f"its share of PyTorch SDPA's best backend at that shape; {short}. "
                         f"Every table: [{rel}/README.md]({rel}/README.md); what it covered: "
                         "[docs/gpus.md](docs/gpus.md#the-runs).")
            stale = (NO_SOURCES if changed is None else
                     f"None of its {len(recorded)} kernels has changed since the run "
                     f"({changed_how(run)})." if not changed else
                     f"Kernels changed since the run, whose figures measured an "
                     f"older version ({changed_how(run)}): "
                     + (f"all {len(recorded)} of its kernels: " if len(changed) == len(recorded)
                        else f"{len(changed)} of its {len(recorded)}: ")
                     + ", ".join(k for k in recorded if k in changed) + ".")
            detail_parts.append(f"**[{rel}]({os.path.relpath(d, os.path.dirname(os.path.abspath(details or path)))}/README.md)**: "
                                f"{run['title']}; {run['date']}. Correctness: "
                                f"{run['check'].get('pass', 0)} runs passed, "
                                f"{run['check'].get('fail', 0)} failed. " + coverage(d, run)
                                + " " + agreement(read_csv(os.path.join(d, "counters.csv")))
                                + "\n\n" + stale)
        body = "\n\n".join(parts)
        detail_body = "\n\n".join(detail_parts)
    markers.rewrite(path, "gpu-results", "Generated by `scripts/gpu_report.py readme`; do not "
                    "edit by hand.\n\n" + body)
    if details:
        markers.rewrite(details, "gpu-run-details", "Generated by `scripts/gpu_report.py "
                        "readme`; do not edit by hand.\n\n" + detail_body)
    return 0


# ---- the chapters --------------------------------------------------------------------------------

# What a chapter's GPU table sets beside its step's kernels, measured in the same run.
REFERENCES = ["torch_sdpa_flash", "torch_sdpa_cudnn", "baseline_cublas"]


def chapter_rows(step):
    """(label, timings.csv step) for a chapter: the step before it, then its rungs in course order
    (the step's own kernel last), or the step itself."""
    ladders = _script("ladders")
    before = _script("counters_table").CHAPTERS[step][0][:-1]
    if step not in ladders.LADDERS:
        return [(k, k) for k in before + [step]]
    names = [r for r, _ in ladders.LADDERS[step]]
    start = (f"{step}[sm80]" if step in ladders.VARIANT and step not in ladders.OWN
             else before[-1])
    return [(start, start)] + [(f"{ladders.label(step, i)} {rung}", ladders.run_name(step, rung))
                               for i, rung in enumerate(names)]


def microseconds(r):
    """A timings row's time in us, with its tile configuration where the step has several."""
    us = 1e3 * float(r["time_ms"])
    return (f"{us:,.0f}" if us >= 1000 else f"{us:.4g}") + (f" ({r['config']})" if r["config"]
                                                            else "")


def chapter_table(step, run, rows, changed=None):
    """The chapter's kernels at the ladder's shapes, TFLOPS and time, beside SDPA and cuBLAS; a
    kernel whose source changed since the run (`changed`, changed_kernels()) marked."""
    ladder = [r for r in rows if is_ladder(r) and not bench.is_backward(r)]
    shapes_seen = list(dict.fromkeys(shape_of(r) for r in ladder))
    by = {}
    for r in ladder:  # a tuned step's own run (its tuned table's configuration) comes first; the
        by.setdefault((shape_of(r), r["step"]), r)  # other configurations' rows after it
    kernels = chapter_rows(step) + [(k, k) for k in REFERENCES]
    out, shown = [], []
    for label, name in kernels:
        cells = []
        for sh in shapes_seen:
            r = by.get((sh, name))
            cells += [microseconds(r), f"{float(r['tflops']):.1f}"] if r else ["-", "-"]
        if any(c != "-" for c in cells):
            mark = changed is not None and name in changed
            out.append([label + (f" {CHANGED_MARK}" if mark else "")] + cells)
            shown.append(name)
    note = changed_note(run, changed, shown)
    head = ["kernel"] + [f"{h}, {sh}" for sh in shapes_seen for h in ("us", "TFLOPS")]
    return (f"Generated by `scripts/gpu_report.py chapters` from a GPU run "
            f"([docs/results/{run['dir']}](../docs/results/{run['dir']}/README.md)): "
            f"{run['title']}; {run['date']}. Measured with CUDA events (the median of 20 runs "
            "after 2 warm-up ones), SDPA's backends and cuBLAS in the same run; -: not run at "
            "that shape (a run predicted over 40 ms)"
            + ("; a tuned step's row is its own run, the configuration its tuned table gives (in "
               "brackets), not the fastest of those timed" if any(
                   by.get((sh, n), {}).get("config") for sh in shapes_seen for n in shown) else "")
            + "; do not edit by hand.\n\n"
            + table(head, out) + (f"\n\n{note}" if note else ""))


def chapters(results, check):
    """Writes (or with check, compares) every step chapter's <!-- gpu:begin --> block."""
    run = load_run(results)
    run["dir"] = os.path.basename(os.path.normpath(results))
    rows = read_csv(os.path.join(results, "timings.csv"))
    root = os.path.dirname(HERE)
    changed = changed_kernels(run)
    stale = []
    for step in _script("counters_table").CHAPTERS:
        path = os.path.join(root, step, "README.md")
        with open(path) as f:
            text = f.read()
        new = markers.replaced(text, "gpu", chapter_table(step, run, rows, changed), path)
        if new != text and check:
            stale.append(os.path.relpath(path, root))
        elif new != text:
            with open(path, "w") as f:
                f.write(new)
            print(f"gpu_report: rewrote {os.path.relpath(path, root)}")
    if stale:
        print("gpu_report: out of date (not what " + results + " measured): " + ", ".join(stale)
              + f"; run scripts/gpu_report.py chapters {results}", file=sys.stderr)
        return 1
    return 0


def redraw(results):
    """A GPU run's chart.png drawn again from its committed timings.csv (the same measurements,
    the same title: run.json's), by this version of chart()."""
    run = load_run(results)
    rows = read_csv(os.path.join(results, "timings.csv"))
    if not rows:
        refuse(f"{results}: no timings.csv to draw")
    note = chart(rows, run["title"], os.path.join(results, "chart.png"))
    if note:
        refuse(f"{results}: {note}")
    print(f"gpu_report: drew {os.path.join(results, 'chart.png')} from its timings.csv")
    return 0


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    cmd, rest = argv[1], argv[2:]
    if cmd == "shapes" and len(rest) == 1:
        print("\n".join(shapes(rest[0])))
        return 0
    if cmd == "ncu" and len(rest) >= 6 and rest[2] == "--budget" and rest[4] == "--suite":
        return ncu_stage(rest[5], rest[0], rest[1], float(rest[3]), "--rehearse" in rest[6:])
    if cmd == "summary" and len(rest) in (3, 4) and rest[3:] in ([], ["--no-chart"]):
        return summary(*rest[:3], draw_chart=not rest[3:])
    if cmd == "readme" and rest:
        allow = "--allow-rehearsal" in rest
        rest = [r for r in rest if r != "--allow-rehearsal"]
        details = None
        if "--details" in rest:
            i = rest.index("--details")
            if i + 1 >= len(rest):
                refuse("readme --details: a Markdown file with <!-- gpu-run-details --> markers")
            details = rest.pop(i + 1)
            rest.pop(i)
        return readme(rest[0], rest[1:], allow, details)
    if cmd == "chart" and len(rest) == 1:
        return redraw(rest[0])
    if cmd == "chapters" and rest and len([r for r in rest if r != "--check"]) == 1:
        return chapters([r for r in rest if r != "--check"][0], "--check" in rest)
    refuse(f"{' '.join(argv[1:])}: see --help for the commands")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
