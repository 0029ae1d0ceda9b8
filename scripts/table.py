#!/usr/bin/env python3
"""Prints the progression table (one row per step and shape) from a results CSV."""
import csv
import sys


def main(path: str) -> int:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        print(f"{path}: no rows", file=sys.stderr)
        return 1
    head = ["step", "backend", "shape", "time_ms", "TFLOPS", "check"]
    table = []
    for r in rows:
        shape = (f"{r['dtype']} B={r['batch']} H={r['heads']} Sq={r['seqlen_q']} "
                 f"Sk={r['seqlen_k']} D={r['dim']}" + (" causal" if r["causal"] == "1" else ""))
        check = "-" if r["checked"] != "1" else ("pass" if r["passed"] == "1" else "FAIL")
        table.append([r["step"], r["backend"], shape, f"{float(r['time_ms']):.3f}",
                      f"{float(r['tflops']):.4f}", check])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *table)]
    for line in [head] + table:
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)))
    if any(r["backend"] != "gpu" for r in rows):
        print("(CPU backend rows: CPU timings, not GPU performance)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "results/results.csv"))
