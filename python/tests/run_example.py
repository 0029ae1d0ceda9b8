#!/usr/bin/env python3
"""Runs an example of python/examples as a reader would (CTest: python.example_attention_layer, for
two steps, and python.example_training), and fails unless it passes. Without PyTorch it prints
"skipped: ..." and exits 77, except where CI asked for PyTorch (ATTN_WITH_TORCH=1): then that is
a failure."""
import importlib.util
import os
import subprocess
import sys

example = sys.argv[1]
if importlib.util.find_spec("torch") is None:
    if os.environ.get("ATTN_WITH_TORCH") == "1":
        print("run_example: ATTN_WITH_TORCH=1 but torch cannot be imported")
        sys.exit(1)
    print("skipped: PyTorch is not installed (ATTN_WITH_TORCH=1 scripts/setup.sh --python "
          "installs it)")
    sys.exit(77)
status = 0
# The arguments each example is run with: the layer for two steps, the training run once.
runs = {"attention_layer.py": ([], ["--step", "step2_tiled", "--rung", "warps", "--dtype", "bf16"]),
        "train_attention.py": ([],)}[os.path.basename(example)]
for args in runs:
    r = subprocess.run([sys.executable, example, *args], capture_output=True, text=True)
    print(r.stdout.strip(), r.stderr.strip(), sep="\n" if r.stderr.strip() else "")
    if r.returncode != 0 or "PASSED" not in r.stdout:
        status = 1
sys.exit(status)
