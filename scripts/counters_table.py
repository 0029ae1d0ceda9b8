#!/usr/bin/env python3
"""The counters tables of the chapters: what each step's lesson changes, counted on the CPU backend.

    scripts/counters_table.py [--build build] [--write | --check]

Runs every kernel step's counted copy (bin/counted/<step>, --counters) once at one shape and
writes, into each chapter (stepN_*/README.md) between <!-- counters:begin --> and
<!-- counters:end -->, a table of the counters that show its lesson, the step beside the one
before it. The counts are exact and deterministic, so --check (run by CTest) fails when a chapter
no longer matches its code; --write regenerates them. Without --write or --check it prints them.
A chapter whose step is a ladder (--rung) also gets, between <!-- rungs:begin --> and
<!-- rungs:end -->, one row per rung: the step before it, then each rung in course order.
The model column is a speed-of-light MODEL (common/sol_model.cpp), never a measurement.
"""
import argparse
import csv
import os
import subprocess
import sys
import tempfile

from ladders import LADDERS as ALL_LADDERS, OWN, VARIANT, run_name
from markers import replaced

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = ["--batch", "1", "--heads", "4", "--seq", "256", "--dim", "64", "--dtype", "fp16"]
SHAPE_TEXT = "fp16, B=1, H=4, S=256, D=64, not causal"
# The SMs the CPU backend presents while counting (SIMT_SMS): fewer than the shape's 8 query tiles
# of 128 rows, so that step 5's persistent grid (2 blocks, 4 tiles each) shows what it saves.
SMS = "2"
SMS_TEXT = f"the CPU backend presenting {SMS} SMs"
# A ladder counted at a shape of its own: step 6's first rungs keep P and dS (Sq x Sk each) in
# global memory and count every access to them, and at SHAPE they took 12 s of the test's time.
SHAPES = {"step6_backward": (["--batch", "1", "--heads", "2", "--seq", "128", "--dim", "64",
                              "--dtype", "fp16"], "fp16, B=1, H=2, S=128, D=64, not causal")}
RUNS = [("step1_naive", None), ("step2_tiled", None), ("step3_fused", None),
        ("step4_tensorcore", None), ("step5_warpspecialized", "sm80"),
        ("step5_warpspecialized", "sm90a")]


def mib(v):
    return f"{int(v) / 2**20:.3f} MiB"


def efficiency(r):
    asked = sum(int(r[c]) for c in ("gld_bytes", "gst_bytes", "ldgsts_bytes"))
    asked += min(int(r["tma_bytes"]), 32 * int(r["tma_sectors"]))
    sectors = sum(int(r[c]) for c in ("gld_sectors", "gst_sectors", "ldgsts_sectors",
                                      "tma_sectors"))
    return f"{100 * asked / (32 * sectors):.0f}%" if sectors else "-"


def conflicts(r, cols=("lds_conflicts", "sts_conflicts", "ldsm_conflicts", "ldgsts_conflicts")):
    return f"{sum(int(r[c]) for c in cols):,}"


def n(col):
    return lambda r: f"{int(r[col]):,}"


# The columns a lesson is about: (header, value of a row).
COLUMNS = {
    "dram": ("DRAM bytes, at least (distinct)", lambda r: mib(r["dram_bytes_min"])),
    "moved": ("global bytes moved (32 x sectors)", lambda r: mib(r["global_bytes_moved"])),
    "ld_req": ("global load requests", n("gld_requests")),
    "ld_sectors": ("global load sectors", n("gld_sectors")),
    "efficiency": ("sector efficiency", efficiency),
    "shared": ("shared wavefronts (ld + st + ldmatrix)",
               lambda r: f"{sum(int(r[c]) for c in ('lds_wavefronts', 'sts_wavefronts', 'ldsm_wavefronts')):,}"),
    "conflicts": ("bank conflicts", conflicts),
    "ldsm_conflicts": ("ldmatrix conflicts", n("ldsm_conflicts")),
    "cp_async": ("cp.async requests", n("ldgsts_requests")),
    "tma": ("TMA copies", n("tma_copies")),
    "mma": ("mma.sync", n("mma")),
    "wgmma": ("wgmma", n("wgmma")),
    "tensor": ("tensor FLOPs / problem FLOPs", lambda r: f"{100 * float(r['tensor_share']):.0f}%"),
    "sectors": ("global sectors (ld + st + cp.async)",
                lambda r: f"{sum(int(r[c]) for c in ('gld_sectors', 'gst_sectors', 'ldgsts_sectors')):,}"),
    "ld_st": ("global load + store requests",
              lambda r: f"{int(r['gld_requests']) + int(r['gst_requests']):,}"),
    "st_sectors": ("global store sectors", n("gst_sectors")),
    "shuffles": ("warp shuffles", n("shuffles")),
    "barriers": ("block barriers (warp-level)", n("block_barriers")),
    "named": ("named barriers", n("named_barriers")),
    "mbarrier": ("mbarrier operations", n("mbarrier_ops")),
    "model": ("H100 SXM MODEL (us, binding unit)",
              lambda r: f"{float(r['model_us']):.3g} ({r['model_bound']})"),
}

# Per chapter: the steps side by side, and the columns that show its lesson.
CHAPTERS = {
    "step1_naive": (["step1_naive"], ["dram", "moved", "ld_req", "ld_sectors", "efficiency",
                                      "model"]),
    "step2_tiled": (["step1_naive", "step2_tiled"], ["dram", "moved", "ld_req", "ld_sectors",
                                                     "efficiency", "shared", "conflicts",
                                                     "model"]),
    "step3_fused": (["step2_tiled", "step3_fused"], ["dram", "moved", "efficiency", "shared",
                                                     "conflicts", "model"]),
    "step4_tensorcore": (["step3_fused", "step4_tensorcore"], ["dram", "efficiency", "cp_async",
                                                               "shared", "ldsm_conflicts",
                                                               "conflicts", "mma", "tensor",
                                                               "barriers", "model"]),
    "step5_warpspecialized": (["step4_tensorcore", "step5_warpspecialized[sm80]",
                               "step5_warpspecialized[sm90a]"],
                              ["dram", "efficiency", "cp_async", "tma", "shared", "conflicts",
                               "mma", "wgmma", "tensor", "barriers", "named", "mbarrier",
                               "model"]),
}


# The columns of each ladder's table: what its rungs change.
RUNG_COLUMNS = {
    "step2_tiled": ["ld_req", "ld_sectors", "st_sectors", "efficiency", "shared", "conflicts",
                    "shuffles", "model"],
    "step4_tensorcore": ["ld_st", "cp_async", "sectors", "shared", "conflicts", "mma", "tensor",
                         "barriers", "model"],
    "step5_warpspecialized": ["efficiency", "cp_async", "tma", "shared", "mma", "wgmma", "tensor",
                              "barriers", "named", "mbarrier", "model"],
    "step6_backward": ["moved", "ld_st", "st_sectors", "cp_async", "tma", "shared", "conflicts",
                       "mma", "tensor", "barriers", "mbarrier", "model"],
}
# The ladders (scripts/ladders.py) whose chapters hold a table of the columns above: each rung
# but the last runs as "<step>[<rung>]". Step 6's starts from no kernel before it (its table has
# no such row) and its last rung is counted too (it is in no chapter's step table).
LADDERS = {step: [r for r, _ in rungs] for step, rungs in ALL_LADDERS.items()
           if step in RUNG_COLUMNS}


def count(build):
    rows = {}
    runs = [(step, variant, None) for step, variant in RUNS]
    # Each rung by name (the last too where no chapter's step table runs it: step 6's).
    runs += [(step, None, rung) for step, rungs in LADDERS.items()
             for rung in (rungs[:-1] if step in CHAPTERS else rungs)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "c.csv")
        for step, variant, rung in runs:
            exe = os.path.join(build, "bin", "counted", step)
            if not os.path.exists(exe):
                raise SystemExit(f"counters_table: {exe} not found: build it (g++ builds the "
                                 "counted copies)")
            shape = SHAPES.get(step, (SHAPE,))[0]
            cmd = [exe, "--backend", "cpu", *shape, "--counters", "--no-check", "--quiet",
                   "--csv", path] + (["--variant", variant] if variant else []) + \
                (["--rung", rung] if rung else [])
            r = subprocess.run(cmd, capture_output=True, text=True,
                               env=dict(os.environ, SIMT_SMS=SMS))
            if r.returncode != 0:
                raise SystemExit(f"counters_table: {' '.join(cmd)} failed: "
                                 f"{(r.stdout + r.stderr).strip()}")
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                rows[r["step"]] = r
    return rows


def table(step, rows):
    steps, cols = CHAPTERS[step]
    lines = [f"Generated by `scripts/counters_table.py --write` from the counted copies "
             f"(`--counters`, {SHAPE_TEXT}, {SMS_TEXT}); exact counts of what each kernel did, "
             "do not edit by hand. The last column is a model, not a measurement "
             "(docs/profiling.md).", "",
             "| step | " + " | ".join(COLUMNS[c][0] for c in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for s in steps:
        r = rows[s]
        lines.append(f"| {s} | " + " | ".join(COLUMNS[c][1](r) for c in cols) + " |")
    return "\n".join(lines)


def rung_table(step, rows):
    """The ladder of `step`: the step before it, then each rung (the last is the step)."""
    rungs = LADDERS[step]
    # The kernel the ladder starts from: the step before, or the step's other variant (none for
    # a step of its own, the backward).
    before = (f"{step}[sm80]" if step in VARIANT and step not in OWN else
              CHAPTERS[step][0][0] if step in CHAPTERS else None)
    cols = RUNG_COLUMNS[step]
    lines = [f"Generated by `scripts/counters_table.py --write` from the counted copies "
             f"(`--counters`, {SHAPES.get(step, (None, SHAPE_TEXT))[1]}, {SMS_TEXT}); exact "
             "counts, do not edit by hand. The last column is a model, not a measurement "
             "(docs/profiling.md).", "",
             "| rung | " + " | ".join(COLUMNS[c][0] for c in cols) + " |",
             "|---|" + "---|" * len(cols)]
    names = [(before, before)] * (before is not None) + [
        (f"{step[4]}.{i + 1} {rung}", run_name(step, rung)) for i, rung in enumerate(rungs)]
    for label, key in names:
        lines.append(f"| {label} | " + " | ".join(COLUMNS[c][1](rows[key]) for c in cols) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the chapters' tables")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 if a chapter's table differs from what the code counts")
    args = ap.parse_args()
    rows = count(args.build)
    stale = []
    for step in dict.fromkeys([*CHAPTERS, *LADDERS]):
        path = os.path.join(ROOT, step, "README.md")
        with open(path) as f:
            text = f.read()
        new = replaced(text, "counters", table(step, rows), path) if step in CHAPTERS else text
        if step in LADDERS:
            new = replaced(new, "rungs", rung_table(step, rows), path)
        if args.write and new != text:
            with open(path, "w") as f:
                f.write(new)
            print(f"counters_table: rewrote {os.path.relpath(path, ROOT)}")
        elif args.check and new != text:
            stale.append(os.path.relpath(path, ROOT))
        elif not args.write and not args.check:
            if step in CHAPTERS:
                print(f"{step}:\n{table(step, rows)}\n")
            if step in LADDERS:
                print(f"{step} rungs:\n{rung_table(step, rows)}\n")
    if stale:
        print("counters_table: out of date (the code counts otherwise): " + ", ".join(stale)
              + "; run scripts/counters_table.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
