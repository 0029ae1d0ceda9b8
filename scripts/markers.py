"""What the scripts that generate figures into Markdown share: the text between a file's
<!-- NAME:begin --> and <!-- NAME:end --> markers, and the machine and the commit a figure was
measured on."""
import os
import subprocess
import sys


def refuse(message):
    """Bad input: one line on stderr, exit status 2."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def replaced(text, name, body, path="the file"):
    """`text` with what stands between NAME's markers replaced by `body`; SystemExit naming the
    file (exit status 2) when the markers are missing or out of order."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in text or end not in text or text.index(begin) > text.index(end):
        refuse(f"{path}: no {begin} ... {end} markers")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + begin + "\n" + body + "\n" + end + tail


def rewrite(path, name, body):
    """Rewrites the text between NAME's markers in the file at `path`."""
    try:
        with open(path) as f:
            text = f.read()
        new = replaced(text, name, body, path)
        with open(path, "w") as f:
            f.write(new)
    except OSError as e:
        refuse(f"{path}: {e.strerror}")


def check(path, name):
    """Refuses (exit status 2) before any work a file that rewrite() could not rewrite."""
    try:
        with open(path) as f:
            replaced(f.read(), name, "", path)
        if not os.access(path, os.W_OK):
            refuse(f"{path}: not writable")
    except OSError as e:
        refuse(f"{path}: {e.strerror}")


def machine():
    """The CPU model and core count, as the generated tables name the machine."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def commit(repo):
    """The commit checked out in `repo`, as the generated tables name it (12 hex digits)."""
    r = subprocess.run(["git", "-C", repo, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                       text=True)
    return r.stdout.strip() if r.returncode == 0 else "an unknown commit"
