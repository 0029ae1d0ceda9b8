#!/usr/bin/env python3
"""Prints the progression table from a results CSV: for each shape, every step with its time,
TFLOPS and speed-up over step1_naive (the first kernel step); the backward pass's rows (step 6,
SDPA's backward) in a table of their own per shape, their TFLOPS over the backward's FLOPs."""
import csv
import sys
from collections import OrderedDict

from bench import is_backward


def shape_of(r):
    return (f"{r['dtype']} B={r['batch']} H={r['heads']}"
            + (f"/{r['heads_kv']}" if r["heads_kv"] != r["heads"] else "")
            + f" Sq={r['seqlen_q']} Sk={r['seqlen_k']} D={r['dim']}"
            + (" causal" if r["causal"] == "1" else ""))


def main(path: str) -> int:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        print(f"{path}: no rows", file=sys.stderr)
        return 1
    groups = OrderedDict()
    for r in rows:
        groups.setdefault(shape_of(r) + (", backward" if is_backward(r) else ""), []).append(r)
    head = ["step", "backend", "time_ms", "TFLOPS", "vs step1", "check"]
    counted = any(r.get("counted") == "1" for r in rows)
    if counted:
        head += ["DRAM MiB (min)", "shared conflicts", "tensor / problem FLOPs", "model us (bound)"]
    for shape, group in groups.items():
        base = next((float(r["time_ms"]) for r in group if r["step"] == "step1_naive"), None)
        table = []
        for r in group:
            t = float(r["time_ms"])
            speedup = f"{base / t:.1f}x" if base and t > 0 else "-"
            check = "-" if r["checked"] != "1" else ("pass" if r["passed"] == "1" else "FAIL")
            line = [r["step"], r["backend"], f"{t:.3f}", f"{float(r['tflops']):.4f}", speedup,
                    check]
            if counted and r.get("counted") == "1":
                conflicts = sum(int(r[c]) for c in ("lds_conflicts", "sts_conflicts",
                                                     "ldsm_conflicts", "ldgsts_conflicts"))
                line += [f"{int(r['dram_bytes_min']) / 2**20:.3f}", f"{conflicts:,}",
                         f"{100 * float(r['tensor_share']):.0f}%",
                         f"{float(r['model_us']):.3g} ({r['model_bound']})"]
            elif counted:
                line += ["-", "-", "-", "-"]
            table.append(line)
        widths = [max(len(x) for x in col) for col in zip(head, *table)]
        print(f"\n{shape}")
        for line in [head] + table:
            print("  " + "  ".join(x.ljust(w) for x, w in zip(line, widths)))
    if any(r["backend"] != "gpu" for r in rows):
        print("\n(cpu rows: CPU timings, not GPU performance; on the CPU backend the time is the "
              "SIMT emulation's)")
    if counted:
        gpu = next(r["model_gpu"] for r in rows if r.get("counted") == "1")
        print(f"(counted rows: exact counts of this run's accesses; 'model us' is a speed-of-light "
              f"MODEL on {gpu} from datasheet figures, not a measurement)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results/results.csv"))
