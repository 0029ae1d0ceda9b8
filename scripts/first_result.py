#!/usr/bin/env python3
"""Measures how long a newcomer waits: clones this repository's HEAD into a temporary directory,
runs the README's main command there (scripts/main.sh) and reports when it printed its first table
and when it finished, as main.sh itself reports them (seconds since it started, its installation
step included).

    scripts/first_result.py [--readme README.md] [-- ARGS for main.sh]

--readme rewrites the sentence between <!-- first-result:begin --> and <!-- first-result:end -->
in that file. Exit status: main.sh's, or 2 when the clone fails or main.sh printed no timing.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

from markers import check, commit, machine, rewrite

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readme", help="rewrite the sentence between the markers of this file")
    ap.add_argument("args", nargs="*", help="arguments for scripts/main.sh")
    args = ap.parse_args()
    if args.readme:
        check(args.readme, "first-result")
    with tempfile.TemporaryDirectory() as tmp:
        clone = os.path.join(tmp, "repo")
        r = subprocess.run(["git", "clone", "-q", ROOT, clone], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"first_result: git clone failed: {r.stderr.strip()}", file=sys.stderr)
            return 2
        measured = commit(clone)
        proc = subprocess.Popen([os.path.join(clone, "scripts", "main.sh"), *args.args],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first = done = built = None
        gpu = False
        for line in proc.stdout:
            sys.stdout.write(line)
            if m := re.match(r"main: steps built (\d+) s", line):
                built = int(m.group(1))
            if m := re.match(r"main: first table (\d+) s", line):
                first = int(m.group(1))
            if m := re.match(r"main: results in .* \((\d+) s\)", line):
                done = int(m.group(1))
            if line.startswith("main: building build-gpu"):
                gpu = True
        status = proc.wait()
    if done is None:
        print("first_result: main.sh printed no timing", file=sys.stderr)
        return 2
    first = first if first is not None else done
    print(f"first_result: first table after {first} s, done after {done} s")
    if args.readme:
        where = "with a GPU" if gpu else "without a GPU"
        rewrite(args.readme, "first-result",
                f"Measured by `scripts/first_result.py --readme README.md` (a fresh clone of "
                f"{measured}, {where}, on {machine()}, the Debian packages installed; .venv made by the command): "
                f"the steps built after {built} s, the first table after **{first} s**, the "
                f"counted results and the chart after {done} s."
                if built is not None else
                f"Measured by `scripts/first_result.py --readme README.md` (a fresh clone of "
                f"{measured}, {where}, on {machine()}): results and the chart after {done} s.")
        print(f"first_result: rewrote {args.readme}")
    return status


if __name__ == "__main__":
    sys.exit(main())
