#!/usr/bin/env python3
"""The performance-progression chart, from results CSVs (scripts/bench.py, bench_torch.py).

    scripts/chart.py results/results.csv [more.csv ...] [--out results/chart]
                     [--gpu-spec A100|H100|H200|L4|RTX4090] [--readme README.md]

Writes OUT.png and OUT.svg (--no-svg: OUT.png alone, for a chart committed under docs/results/).
From a GPU's rows, two panels:
  1. measured: TFLOPS of every step for each shape (log scale), speed-up over step1_naive on each
     bar, baselines (cuBLAS, PyTorch SDPA) as reference lines, and the GPU's datasheet peak as a
     ceiling when the device is one of the specs below.
  2. model: a roofline for the chosen GPU spec with each step placed by its FLOPs and its
     modelled HBM bytes (STEP_TRAFFIC below) at the largest shape in the CSV. It is a model,
     labelled as such, not a measurement.
From the CPU backend's rows with counters (bench.py runs --counters there), the counted
progression instead, since the emulator's time says nothing about a GPU: per step and shape, the
DRAM bytes at least moved, the sector efficiency of global memory, shared-memory bank conflicts,
and the speed-of-light MODEL's time on one GPU with its binding unit and the tensor-core share.
CPU rows without counters get the first layout, titled "CPU backend: not GPU performance".
--readme rewrites the results table between <!-- results:begin --> and <!-- results:end -->.
CSVs from more than one GPU (a workshop's participants, say) are never mixed in one chart: each
GPU gets its own, OUT-<gpu>.png / .svg, made from the files whose GPU rows come from it (with
their CPU rows: step0 runs on the host), and the README table lists each machine separately.
The backward pass's rows (step 6, SDPA's backward: FLOPs 2.5 times the forward's) are kept out
of the forward's chart: they get OUT-backward.png / .svg, counted as above from the CPU backend,
else their TFLOPS per shape beside SDPA's backward; the README table labels them "(backward)".
A malformed CSV (missing column, non-numeric value, no rows) is refused with exit status 2.
"""
import argparse
import csv
import math
import os
import sys
from collections import OrderedDict

from bench import is_backward

REQUIRED = ["step", "backend", "device", "dtype", "batch", "heads", "heads_kv", "seqlen_q",
            "seqlen_k", "dim", "causal", "time_ms", "tflops", "flops", "checked", "passed",
            "commit", "toolkit"]
NUMERIC = ["batch", "heads", "heads_kv", "seqlen_q", "seqlen_k", "dim", "causal", "time_ms",
           "tflops", "flops"]

# Vendor datasheet peaks (dense, no sparsity), NOT measured here: HBM bandwidth in GB/s, FP32
# CUDA-core TFLOPS, FP16/BF16 tensor-core TFLOPS with FP32 accumulation.
GPU_SPECS = {
    "A100": {"match": ["A100"], "bw": 2039, "fp32": 19.5, "tensor": 312},
    "H100": {"match": ["H100"], "bw": 3350, "fp32": 67, "tensor": 989},
    "H200": {"match": ["H200"], "bw": 4800, "fp32": 67, "tensor": 989},
    "L4": {"match": [" L4"], "bw": 300, "fp32": 30.3, "tensor": 121},
    "RTX4090": {"match": ["4090"], "bw": 1008, "fp32": 82.6, "tensor": 165.2},
}

# The traffic model, per step: bytes of S/P each (i, j) element costs in HBM on top of the
# compulsory traffic (Q, K, V read once, O and LSE written once), and which peak bounds its
# arithmetic. Re-reads of Q/K/V tiles are assumed to hit L2. step1 reads P once per 32-wide block
# of output columns (its output_kernel), hence the ceil(D / 32).
STEP_TRAFFIC = {
    # step: (S/P bytes per element as a function of D, compute units)
    "step1_naive": (lambda d: 4 * (5 + math.ceil(d / 32)), "fp32"),  # S write, 3 reads + P write, P reads
    "step2_tiled": (lambda d: 4 * 6, "fp32"),       # S write; softmax 3 reads + 1 write; P read once
    "step3_fused": (lambda d: 0, "fp32"),           # S and P stay on chip
    "step4_tensorcore": (lambda d: 0, "tensor"),
    "step5_warpspecialized": (lambda d: 0, "tensor"),
    "baseline_cublas": (lambda d: 4 + 3 * 4 + 2 + 2, "tensor"),  # S fp32 write, 3 reads, P write+read
}
BASELINE_PREFIXES = ("baseline_", "torch_sdpa_")


def step_label(r):
    return r["step"] + (" (backward)" if is_backward(r) else "")


class CsvError(Exception):
    pass


def load(paths):
    rows = []
    for path in paths:
        try:
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
                if missing:
                    raise CsvError(f"{path}: missing column(s): {', '.join(missing)}")
                for n, r in enumerate(reader, start=2):
                    for c in NUMERIC:
                        try:
                            r[c] = float(r[c])
                        except (TypeError, ValueError):
                            raise CsvError(f"{path}:{n}: column {c} is not a number: {r[c]!r}")
                    r["_source"] = path
                    rows.append(r)
        except OSError as e:
            raise CsvError(f"{path}: {e.strerror}")
    if not rows:
        raise CsvError(f"{', '.join(paths)}: no result rows")
    return rows


def slug(text):
    text = text.lower().replace("nvidia ", "")
    return "-".join("".join(c if c.isalnum() else " " for c in text).split()) or "device"


def by_machine(rows):
    """{gpu device: rows}, one entry per GPU, a file's rows going with the GPU its GPU rows came
    from; files without GPU rows are grouped by their device too."""
    files = OrderedDict()
    for r in rows:
        files.setdefault(r["_source"], []).append(r)
    groups = OrderedDict()
    for file_rows in files.values():
        gpus = sorted({r["device"] for r in file_rows if r["backend"] == "gpu"})
        if len(gpus) > 1:
            raise CsvError(f"{file_rows[0]['_source']}: rows from {len(gpus)} GPUs "
                           f"({', '.join(gpus)}): one file per machine")
        groups.setdefault(gpus[0] if gpus else file_rows[0]["device"], []).extend(file_rows)
    return groups


def shape_key(r):
    return (r["dtype"], int(r["batch"]), int(r["heads"]), int(r["heads_kv"]), int(r["seqlen_q"]),
            int(r["seqlen_k"]), int(r["dim"]), int(r["causal"]))


def shape_label(k, short=False):
    dtype, b, h, hkv, sq, sk, d, causal = k
    s = f"S={sq}" if sq == sk else f"Sq={sq} Sk={sk}"
    if short:
        return f"{s}\nD={d}{' causal' if causal else ''}"
    return (f"{dtype} B={b} H={h}{'/' + str(hkv) if hkv != h else ''} {s} D={d}"
            + (" causal" if causal else ""))


def spec_for(rows, name):
    if name:
        return name, GPU_SPECS[name]
    for r in rows:
        if r["backend"] == "gpu":
            for key, spec in GPU_SPECS.items():
                if any(m in " " + r["device"] for m in spec["match"]):
                    return key, spec
    return "H100", GPU_SPECS["H100"]


def modelled_bytes(step, k):
    dtype, b, h, hkv, sq, sk, d, causal = k
    compulsory = b * h * (2 * sq * d * 2 + 4 * sq) + b * hkv * 2 * sk * d * 2
    per_elem = STEP_TRAFFIC[step][0](d)
    return compulsory + b * h * sq * sk * per_elem


COUNTED = ["dram_bytes_min", "global_bytes_moved", "gld_bytes", "gst_bytes", "gld_sectors",
           "gst_sectors", "ldgsts_sectors", "ldgsts_bytes", "tma_sectors", "tma_bytes",
           "lds_wavefronts", "sts_wavefronts", "ldsm_wavefronts",
           "lds_conflicts", "sts_conflicts", "ldsm_conflicts", "ldgsts_conflicts",
           "tensor_share", "model_us"]


def counted(r):
    """The counters of a --counters row as numbers, or None for a row without them."""
    if r.get("counted") != "1":
        return None
    out = {}
    for c in COUNTED:
        try:
            out[c] = float(r[c])
        except (KeyError, TypeError, ValueError):
            raise CsvError(f"{r['_source']}: counted row of {r['step']}: column {c} is not a "
                           f"number: {r.get(c)!r}")
    out["model_gpu"], out["model_bound"] = r.get("model_gpu", ""), r.get("model_bound", "")
    # Every path to global memory: loads, stores, cp.async, TMA (a box moves whole sectors; its
    # zero-filled rows past the tensor ask for nothing from it).
    asked = out["gld_bytes"] + out["gst_bytes"] + out["ldgsts_bytes"] + \
        min(out["tma_bytes"], 32 * out["tma_sectors"])
    sectors = out["gld_sectors"] + out["gst_sectors"] + out["ldgsts_sectors"] + out["tma_sectors"]
    out["ld_st_efficiency"] = 100 * asked / (32 * sectors) if sectors else float("nan")
    waves = out["lds_wavefronts"] + out["sts_wavefronts"] + out["ldsm_wavefronts"]
    conflicts = out["lds_conflicts"] + out["sts_conflicts"] + out["ldsm_conflicts"] + \
        out["ldgsts_conflicts"]
    out["conflicts"] = conflicts
    out["conflict_pct"] = 100 * conflicts / waves if waves else 0.0
    return out


def measured(rows):
    """A measured chart's parts: the kernels (bars) and baselines (lines) in the rows' order, the
    shapes, each (step, shape)'s row (the last wins), and whether every row is the CPU's."""
    names = list(OrderedDict.fromkeys(r["step"] for r in rows))
    return ([s for s in names if not s.startswith(BASELINE_PREFIXES)],
            [s for s in names if s.startswith(BASELINE_PREFIXES)],
            list(OrderedDict.fromkeys(shape_key(r) for r in rows)),
            {(r["step"], shape_key(r)): r for r in rows},
            all(r["backend"] != "gpu" for r in rows))


def baseline_lines(ax, by, baselines, shapes):
    """Each baseline's TFLOPS as a reference line across its shapes' bars, labelled once."""
    for bi, base in enumerate(baselines):
        for xi, k in enumerate(shapes):
            r = by.get((base, k))
            if r is not None and r["tflops"] > 0:
                ax.hlines(r["tflops"], xi - 0.45, xi + 0.45, colors="k",
                          linestyles=["--", ":", "-.", (0, (1, 3))][bi % 4], linewidth=1.2,
                          label=base if xi == next(i for i, kk in enumerate(shapes)
                                                   if by.get((base, kk))) else None)


# What save() writes: the PNG, and the SVG unless --no-svg (a chart committed under docs/results/
# is its PNG alone: the SVG, thousands of generated lines, is for results/, which git ignores).
FORMATS = [".png", ".svg"]


def save(fig, out):
    """Writes OUT.png and OUT.svg (FORMATS); returns their paths."""
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)) or ".", exist_ok=True)
    for ext in FORMATS:
        fig.savefig(out + ext, **({"dpi": 110} if ext == ".png" else {}))
    return [out + ext for ext in FORMATS]


def plot_counted(rows, out, backward=False):
    """The counted progression of a CPU run (see the module's docstring); `backward`: of the
    backward pass's rows."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if counted(r)]
    steps = list(OrderedDict.fromkeys(r["step"] for r in rows))
    shapes = list(OrderedDict.fromkeys(shape_key(r) for r in rows))
    by = {(r["step"], shape_key(r)): counted(r) for r in rows}
    gpu = next(c["model_gpu"] for c in by.values() if c)
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {st: palette[i % len(palette)] for i, st in enumerate(steps)}
    fig, axes = plt.subplots(2, 2, figsize=(max(12, 2.2 * len(shapes) + 8), 9))
    width = 0.8 / max(1, len(steps))

    def bars(ax, key, fmt, log=False):
        for si, step in enumerate(steps):
            xs, ys, labels = [], [], []
            for xi, k in enumerate(shapes):
                c = by.get((step, k))
                if c is None or (log and c[key] <= 0) or c[key] != c[key]:
                    continue
                xs.append(xi - 0.4 + width * (si + 0.5))
                ys.append(c[key])
                labels.append(fmt(c))
            ax.bar(xs, ys, width, label=step, color=color[step])
            for x, y, text in zip(xs, ys, labels):
                ax.annotate(text, (x, y), xytext=(0, 2), textcoords="offset points",
                            ha="center", va="bottom", fontsize=6, rotation=90)
        if log:
            ax.set_yscale("log")
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi * (6 if log else 1.35))
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels([shape_label(k, short=True) for k in shapes], fontsize=8)
        ax.grid(axis="y", which="both", alpha=0.3)

    ax = axes[0][0]
    bars(ax, "dram_bytes_min", lambda c: f"{c['dram_bytes_min'] / 2**20:.2f} MiB", log=True)
    ax.set_title("Counted: DRAM bytes at least moved (distinct bytes touched)\n" + (
        "Q, K, V, O, LSE, dO, the gradients, and the FP32 dQ and D_i" if backward else
        "steps 1-2 write and read S/P; from step 3 on only Q, K, V, O, LSE"), fontsize=9)
    ax.set_ylabel("bytes (log)")
    ax.legend(fontsize=7, loc="upper right")
    ax = axes[0][1]
    bars(ax, "ld_st_efficiency", lambda c: f"{c['ld_st_efficiency']:.0f}%")
    ax.set_title("Counted: sector efficiency of global memory, every path\n(bytes asked for / 32 x"
                 " sectors; l1tex__t_sectors_pipe_lsu_mem_global_op_ld/st/ldgsts, TMA)",
                 fontsize=9)
    ax.set_ylabel("%")
    ax = axes[1][0]
    bars(ax, "conflict_pct", lambda c: f"{int(c['conflicts']):,}")
    ax.set_title("Counted: shared-memory bank conflicts, % of wavefronts (label: count)\n"
                 "(l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld/st/ldsm)", fontsize=9)
    ax.set_ylabel("% of wavefronts")
    ax = axes[1][1]
    bars(ax, "model_us", lambda c: f"{c['model_bound']}, {100 * c['tensor_share']:.0f}%",
         log=True)
    ax.set_title(f"MODEL, not a measurement: speed-of-light time on {gpu}\n(beside each bar: the "
                 "binding unit, and tensor FLOPs / problem FLOPs, over 100% where masked keys "
                 "are computed)", fontsize=9)
    ax.set_ylabel("microseconds (model, log)")
    fig.suptitle(("The backward pass (dQ, dK, dV; FLOPs 2.5 times the forward's)\n" if backward
                  else "") + f"Counted on the CPU backend ({rows[0]['device']}), commit "
                 f"{rows[0]['commit']}: what each step does, not how fast a GPU does it",
                 fontsize=11)
    return save(fig, out)


def plot(rows, out, spec_name):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if all(r["backend"] != "gpu" for r in rows) and any(counted(r) for r in rows):
        return plot_counted(rows, out)

    steps, baselines, shapes, by, all_cpu = measured(rows)
    gpu_devices = sorted({r["device"] for r in rows if r["backend"] == "gpu"})
    spec_key, spec = spec_for(rows, spec_name)

    fig, (ax, rax) = plt.subplots(1, 2, figsize=(max(11, 1.6 * len(shapes) + 7), 6.2),
                                  gridspec_kw={"width_ratios": [max(2, len(shapes)), 2.2]})
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    known = ["step0_reference"] + list(STEP_TRAFFIC)
    color = {st: palette[i % len(palette)] for i, st in enumerate(known + [
        x for x in steps if x not in known])}  # one colour per step in both panels
    markers = dict(zip(known, "Do^sPXv"))
    width = 0.8 / max(1, len(steps))
    for si, step in enumerate(steps):
        xs, ys, notes = [], [], []
        for xi, k in enumerate(shapes):
            r = by.get((step, k))
            if r is None or r["tflops"] <= 0:
                continue
            xs.append(xi - 0.4 + width * (si + 0.5))
            ys.append(r["tflops"])
            base = by.get(("step1_naive", k))
            notes.append(f"{base['time_ms'] / r['time_ms']:.1f}x"
                         if base and step != "step1_naive" and r["time_ms"] > 0 else "")
        label = step + (" (CPU)" if not all_cpu and any(
            by.get((step, k), {}).get("backend") == "cpu" for k in shapes) else "")
        ax.bar(xs, ys, width, label=label, color=color[step])
        for x, y, note in zip(xs, ys, notes):
            if note:
                ax.annotate(note, (x, y), xytext=(0, 2), textcoords="offset points",
                            ha="center", va="bottom", fontsize=7, rotation=90)
    baseline_lines(ax, by, baselines, shapes)
    if gpu_devices and spec_key and any(any(m in " " + d for m in spec["match"])
                                        for d in gpu_devices):
        ax.axhline(spec["tensor"], color="gray", linewidth=1)
        ax.text(len(shapes) - 0.5, spec["tensor"], f"{spec_key} FP16 tensor peak "
                f"(datasheet) {spec['tensor']} TFLOPS", ha="right", va="bottom", fontsize=8)
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi * 4)  # room for the speed-up labels above the bars
    ax.text(0.99, 0.99, "bar labels: speed-up over step1_naive", transform=ax.transAxes,
            ha="right", va="top", fontsize=8)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([shape_label(k, short=True) for k in shapes], fontsize=8)
    ax.set_ylabel("TFLOPS (4 * D per unmasked (i, j) pair, median time)")
    where = ", ".join(gpu_devices) if gpu_devices else rows[0]["device"]
    ax.set_title(f"Measured: {where}\ncommit {rows[0]['commit']}, {rows[0]['toolkit']}",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(axis="y", which="both", alpha=0.3)
    if all_cpu:
        ax.text(0.5, 0.5, "CPU backend:\nnot GPU performance", transform=ax.transAxes,
                ha="center", va="center", fontsize=22, color="red", alpha=0.25, rotation=20)

    # The roofline model at the largest shape.
    k = max(shapes, key=lambda s: by.get(("step1_naive", s), by.get((steps[0], s)))["flops"])
    flops = next(r["flops"] for r in rows if shape_key(r) == k)
    ai_lo, ai_hi = 0.1, 10000
    xs = [ai_lo * (ai_hi / ai_lo) ** (i / 200) for i in range(201)]
    for unit, style in (("fp32", ":"), ("tensor", "-")):
        rax.plot(xs, [min(spec[unit], x * spec["bw"] / 1000) for x in xs], style, color="gray",
                 label=f"{'FP32 CUDA cores' if unit == 'fp32' else 'FP16 tensor cores'} "
                 f"{spec[unit]} TFLOPS")
    for step in STEP_TRAFFIC:
        unit = STEP_TRAFFIC[step][1]
        ai = flops / modelled_bytes(step, k)
        bound = min(spec[unit], ai * spec["bw"] / 1000)
        # Steps with the same traffic share a point: distinct markers, hollow, keep both visible.
        rax.plot([ai], [bound], markers[step], color=color[step], markerfacecolor="none",
                 markersize=9, markeredgewidth=1.6,
                 label=f"{step}: {ai:.0f} FLOP/B, <= {bound:.0f} TFLOPS"
                 + ("" if step in [s.split("[")[0] for s in steps] or step in baselines
                    else " (not in this CSV)"))  # "step5_x[sm80]": a variant of step5_x
    rax.set_xscale("log")
    rax.set_yscale("log")
    rax.set_xlabel("arithmetic intensity (FLOP per modelled HBM byte)")
    rax.set_ylabel("attainable TFLOPS (model)")
    rax.set_title(f"MODEL, not a measurement: roofline of {spec_key} (datasheet: "
                  f"{spec['bw']} GB/s)\nat {shape_label(k)}", fontsize=9)
    rax.legend(fontsize=7, loc="lower right")
    rax.grid(which="both", alpha=0.3)
    if all_cpu:
        fig.suptitle("CPU backend: not GPU performance", color="red", fontsize=13)
    return save(fig, out)


def plot_backward(rows, out):
    """The backward pass's rows in a chart of their own (OUT-backward): counted, from the CPU
    backend's rows with counters; else measured, TFLOPS over the backward's FLOPs (2.5 times the
    forward's) per shape, step 6's kernels as bars and SDPA's backward as reference lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if all(r["backend"] != "gpu" for r in rows) and any(counted(r) for r in rows):
        return plot_counted(rows, out, backward=True)
    kernels, baselines, shapes, by, all_cpu = measured(rows)
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(shapes) + 4), 5.5))
    width = 0.8 / max(1, len(kernels))
    for ki, kernel in enumerate(kernels):
        xs = [xi - 0.4 + width * (ki + 0.5) for xi, k in enumerate(shapes)
              if by.get((kernel, k)) and by[(kernel, k)]["tflops"] > 0]
        ys = [by[(kernel, k)]["tflops"] for k in shapes
              if by.get((kernel, k)) and by[(kernel, k)]["tflops"] > 0]
        ax.bar(xs, ys, width, label=kernel)
    baseline_lines(ax, by, baselines, shapes)
    ax.set_yscale("log")
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([shape_label(k, short=True) for k in shapes], fontsize=8)
    ax.set_ylabel("TFLOPS (2.5 x 4 * D per unmasked (i, j) pair, median time)")
    where = ", ".join(sorted({r["device"] for r in rows}))
    ax.set_title(f"The backward pass, measured: {where}\ncommit {rows[0]['commit']}, "
                 f"{rows[0]['toolkit']}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(axis="y", which="both", alpha=0.3)
    if all_cpu:
        ax.text(0.5, 0.5, "CPU backend:\nnot GPU performance", transform=ax.transAxes,
                ha="center", va="center", fontsize=22, color="red", alpha=0.25, rotation=20)
    return save(fig, out)


# What the counted tables' tensor column divides, and why it passes 100%.
TENSOR_RATIO_NOTE = (
    "Tensor FLOPs / problem FLOPs: the FLOPs the tensor-core instructions did (2 m n k each, "
    "counted) over the problem's own (4 D per visible score). Over 100% where a tile computes "
    "scores the mask then discards (the causal diagonal's tiles, a partial last tile) or, in "
    "step 5's sm90a kernel, the row sums as a wgmma with a tile of ones; under 100% where part "
    "of the work runs on CUDA cores.")


def readme_table(rows, sources):
    lines = [f"Generated by `scripts/chart.py --readme README.md {' '.join(sources)}`; "
             "do not edit by hand."]
    groups = OrderedDict()
    for r in rows:
        groups.setdefault((r["device"], r["backend"], r["commit"], r["toolkit"]), []).append(r)
    for (device, backend, commit, toolkit), group in groups.items():
        note = " (CPU backend: not GPU performance)" if backend != "gpu" else ""
        lines += ["", f"**{device}**, backend {backend}, commit {commit}, toolkit {toolkit}{note}",
                  "", "| shape | step | time (ms) | TFLOPS | vs step1 | check |",
                  "|---|---|---|---|---|---|"]
        base = {shape_key(r): r["time_ms"] for r in group if r["step"] == "step1_naive"}
        if backend != "gpu" and any(counted(r) for r in group):
            gpu = next(counted(r)["model_gpu"] for r in group if counted(r))
            lines[-2:] = ["| shape | step | DRAM bytes, at least | sector efficiency | shared "
                          f"conflicts | tensor FLOPs / problem FLOPs | {gpu} MODEL (us, binding "
                          "unit) | emulator ms | check |", "|---|---|---|---|---|---|---|---|---|"]
            for r in group:
                c = counted(r)
                check = "-" if r["checked"] != "1" else ("pass" if r["passed"] == "1" else "FAIL")
                if c is None:
                    lines.append(f"| {shape_label(shape_key(r))} | {step_label(r)} | - | - | - | "
                                 f"- | - | {r['time_ms']:.3f} | {check} |")
                    continue
                lines.append(f"| {shape_label(shape_key(r))} | {step_label(r)} | "
                             f"{c['dram_bytes_min'] / 2**20:.3f} MiB | "
                             f"{c['ld_st_efficiency']:.0f}% | {int(c['conflicts']):,} | "
                             f"{100 * c['tensor_share']:.0f}% | {c['model_us']:.3g} "
                             f"({c['model_bound']}) | {r['time_ms']:.3f} | {check} |")
            lines += ["", TENSOR_RATIO_NOTE]
            continue
        for r in group:
            b = None if is_backward(r) else base.get(shape_key(r))
            speed = f"{b / r['time_ms']:.1f}x" if b and r["time_ms"] > 0 else "-"
            check = "-" if r["checked"] != "1" else ("pass" if r["passed"] == "1" else "FAIL")
            lines.append(f"| {shape_label(shape_key(r))} | {step_label(r)} | {r['time_ms']:.3f} | "
                         f"{r['tflops']:.4g} | {speed} | {check} |")
    return "\n".join(lines)


def rewrite_readme(path, table):
    begin, end = "<!-- results:begin -->", "<!-- results:end -->"
    with open(path) as f:
        text = f.read()
    if begin not in text or end not in text or text.index(begin) > text.index(end):
        raise CsvError(f"{path}: no {begin} ... {end} markers")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path, "w") as f:
        f.write(head + begin + "\n" + table + "\n" + end + tail)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--out", default="results/chart", help="writes OUT.png and OUT.svg")
    ap.add_argument("--gpu-spec", choices=list(GPU_SPECS),
                    help="GPU for the roofline model (default: the CSV's GPU, else H100)")
    ap.add_argument("--readme", help="rewrite the results table between the markers of this file")
    ap.add_argument("--no-plot", action="store_true", help="only rewrite the README table")
    ap.add_argument("--no-svg", action="store_true",
                    help="write OUT.png alone (for a chart committed under docs/results/)")
    args = ap.parse_args()
    if args.no_svg:
        FORMATS[:] = [".png"]
    try:
        rows = load(args.csv)
        groups = by_machine(rows)
        if not args.no_plot:
            for device, group in groups.items():
                out = args.out if len(groups) == 1 else f"{args.out}-{slug(device)}"
                forward = [r for r in group if not is_backward(r)]
                backward = [r for r in group if is_backward(r)]
                written = plot(forward, out, args.gpu_spec) if forward else []
                if backward:  # the backward pass's rows: a chart of their own
                    written += plot_backward(backward, out + "-backward")
                for p in written:
                    print(f"chart: wrote {p}")
        if args.readme:
            rewrite_readme(args.readme, readme_table(rows, args.csv))
            print(f"chart: rewrote the results table in {args.readme}")
    except CsvError as e:
        print(f"chart: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
