#!/usr/bin/env python3
"""Prints each skipped test of the last CTest run with its reason, one line each.

    scripts/skips.py [build/Testing/Temporary/LastTest.log]

CTest's summary shows a skipped test as "***Skipped" only; the reason is what the test printed
("skipped: ..." or "SCRIPT: skipped: ..."), which CTest keeps in LastTest.log. scripts/test.sh runs this after CTest.
"""
import re
import sys


def skips(text):
    """[(test name, reason)] for every test whose output has a 'skipped: ' line, in log order."""
    found = []
    for block in re.split(r"\n-{58}\n\n", text):
        name = re.search(r"^\d+/\d+ Test: (.+)$", block, re.M)
        output = re.search(r"^Output:\n-{58}\n(.*?)^<end of output>", block, re.M | re.S)
        if not name or not output:
            continue
        for line in output.group(1).splitlines():
            # "skipped: why", or a script's "check_sdpa: skipped: why"
            if m := re.match(r"(?:[\w.-]+: )?skipped: (.*)", line):
                found.append((name.group(1), m.group(1)))
                break
    return found


def main(path):
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError as e:
        print(f"skips: {path}: {e.strerror}", file=sys.stderr)
        return 2
    for name, reason in skips(text):
        print(f"skipped: {name}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/Testing/Temporary/LastTest.log"))
