#!/usr/bin/env python3
"""The scripts a GPU bundle carries (scripts/gpu_bundle.sh): gpu_run.sh, the scripts it runs
(`"$bundle/scripts/NAME.py"`), and every script of this folder that those import, followed
through their own imports (`import NAME`, `from NAME import ...`, and `_script("NAME")`, the
report's way of loading a sibling by its path). Found by reading the code, so that a script one of
them starts to import travels with it.

    scripts/bundled_scripts.py        one file name a line, gpu_run.sh first
"""
import ast
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def imported(path):
    """The names of this folder's scripts that the Python file at `path` imports."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_script"
              and node.args and isinstance(node.args[0], ast.Constant)):
            names.add(node.args[0].value)
    return {n for n in names if os.path.exists(os.path.join(HERE, f"{n}.py"))}


def bundled():
    """gpu_run.sh and every script it needs, in the order found."""
    with open(os.path.join(HERE, "gpu_run.sh")) as f:
        run = f.read()
    todo = list(dict.fromkeys(re.findall(r'\$bundle/scripts/(\w+)\.py', run)))
    seen = []
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.append(name)
        todo += sorted(imported(os.path.join(HERE, f"{name}.py")) - set(seen))
    return ["gpu_run.sh"] + [f"{n}.py" for n in seen]


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(f"bundled_scripts: {' '.join(sys.argv[1:])}: takes no arguments", file=sys.stderr)
        sys.exit(2)
    print("\n".join(bundled()))
