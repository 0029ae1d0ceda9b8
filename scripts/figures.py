#!/usr/bin/env python3
"""The chapters' figures that come from the kernels' own layout functions: each is printed by a
small program of the build (step4_tensorcore/figures.cpp, which includes the rung's kernel file
and calls its functions; step5_warpspecialized/figures.cpp, which runs the kernels on the CPU
backend and draws the order of their synchronisation; step6_backward/figures.cpp, which runs them
and draws the tiles their copies read) and stands in a chapter between
<!-- NAME:begin --> and <!-- NAME:end -->.

    scripts/figures.py [--build build] [--write | --check]

Without --write or --check it prints them. --check exits 1 if a chapter's figure differs from what
the code draws (CTest runs it); bad input is one line and exit 2.
"""
import argparse
import os
import subprocess
import sys

from markers import refuse, replaced, rewrite

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (chapter, marker name, program in the build's bin/ and its argument)
FIGURES = [("step4_tensorcore/README.md", "fragments-figure",
            ["step4_layout_figures", "fragments"]),
           ("step4_tensorcore/README.md", "swizzle-figure", ["step4_layout_figures", "swizzle"]),
           ("step4_tensorcore/README.md", "sweep-figure", ["step4_layout_figures", "sweep"]),
           ("step5_warpspecialized/README.md", "ring-figure", ["step5_ring_figures", "ring"]),
           ("step5_warpspecialized/README.md", "pingpong-figure",
            ["step5_ring_figures", "pingpong"]),
           ("step5_warpspecialized/README.md", "overlap-figure", ["step5_ring_figures", "overlap"]),
           ("step5_warpspecialized/README.md", "split-figure",
            ["step5_ring_figures", "split"]),
           ("step5_warpspecialized/README.md", "pack-figure", ["step5_ring_figures", "pack"]),
           ("step6_backward/README.md", "walk-figure", ["step6_walk_figures", "walk"])]


def draw(build, command):
    program, *args = command
    path = os.path.join(build, "bin", program)
    if not os.access(path, os.X_OK):
        refuse(f"figures: {path} not found: build it first (cmake --build {build} --target "
               f"{program})")
    r = subprocess.run([path, *args], capture_output=True, text=True)
    if r.returncode != 0:
        refuse(f"figures: {program} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return r.stdout.rstrip("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the chapters' figures")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 if a chapter's figure differs from what the code draws")
    args = ap.parse_args()
    stale = []
    for chapter, name, program in FIGURES:
        figure = draw(args.build, program)
        path = os.path.join(ROOT, chapter)
        if args.write:
            rewrite(path, name, figure)
            print(f"figures: rewrote {name} in {chapter}")
        elif args.check:
            with open(path) as f:
                text = f.read()
            if replaced(text, name, figure, path) != text:
                stale.append(chapter)
        else:
            print(f"{chapter} ({name}):\n{figure}\n")
    if stale:
        print("figures: out of date (the code draws otherwise): " + ", ".join(stale)
              + "; run scripts/figures.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
