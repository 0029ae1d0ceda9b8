#!/usr/bin/env python3
"""Counts each chapter's hand-written words and the time they take to read.

    scripts/chapter_words.py                     # every chapter (stepN_*/README.md), as a table
    scripts/chapter_words.py FILE ...            # those Markdown files
    scripts/chapter_words.py --max-words 3500    # the table, then exit 1 if a chapter is longer

What counts: the words a person wrote and a reader reads as prose: paragraphs, headings, list
items, the text of links (not their addresses), `code spans` inside a sentence. What does not:
a generated block (from <!-- NAME:begin --> to <!-- NAME:end -->: a script wrote it), any other
HTML comment, a table (a line that starts with `|`), a code block (fenced with ``` or ~~~, or
indented by four spaces or a tab after a blank line: commands, formulas, diagrams) and an image
line. A word is a run of non-blank characters holding at least one letter or digit, so `->` or
`+=` is not one.

The rule for the reading time: the hand-written words at 200 words a minute, rounded up to the
minute. 200 is the low end of what adults read silently in non-fiction prose (Brysbaert, "How
many words do we read per minute?", 2019: about 240 on average), for prose read beside the code it
explains. The time leaves out the code blocks (counted as lines, beside the words, not timed:
how long a reader studies a diagram or a kernel has no rate to measure) and the chapter's commands,
which run in seconds on the CPU backend (docs/contributing.md's edit-loop table measures them),
and the exercises. docs/README.md's path shows this time for each chapter
(scripts/steps_table.py reads it from here).

Exit status: 0; 1 when --max-words is given and a chapter is over it (one line on stderr naming
each); 2 for bad input (a file that cannot be read, a limit that is not a positive number).
"""
import argparse
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS_PER_MINUTE = 200

GENERATED = re.compile(r"<!-- ([\w.-]+):begin -->.*?<!-- \1:end -->", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
INDENTED = re.compile(r"(?: {4}|\t).*\S")


def _blank_out(match):
    """What stands in for a removed span: its line breaks, so that the lines around keep theirs."""
    return "\n" * match.group(0).count("\n")


def prose_and_code(text):
    """(the hand-written prose lines, the number of code lines) of a Markdown text."""
    text = GENERATED.sub(_blank_out, text)
    text = COMMENT.sub(_blank_out, text)
    prose, code, fence = [], 0, None
    prev_blank, prev_code = True, False
    for line in text.split("\n"):
        stripped = line.strip()
        if fence:
            if stripped.startswith(fence):
                fence = None
            else:
                code += 1
            prev_blank, prev_code = False, False
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            prev_blank, prev_code = False, False
            continue
        if INDENTED.match(line) and (prev_blank or prev_code):
            code += 1
            prev_blank, prev_code = False, True
            continue
        prev_code = prev_code and not stripped  # a blank line inside a code block keeps it open
        prev_blank = not stripped
        if stripped.startswith("|"):
            continue
        line = IMAGE.sub("", line)
        if stripped and not line.strip():  # a line that held only images
            continue
        prose.append(LINK_TARGET.sub("]", line))
    return prose, code


def words(text):
    """The hand-written words of a Markdown text (the module's docstring says which)."""
    prose, _ = prose_and_code(text)
    return sum(1 for line in prose for token in line.split() if re.search(r"[^\W_]", token))


def minutes(n_words):
    """The reading time of `n_words` hand-written words, in whole minutes (rounded up)."""
    return math.ceil(n_words / WORDS_PER_MINUTE)


def chapters():
    """Every chapter, in course order."""
    return sorted(ROOT.glob("step[0-9]_*/README.md"))


def count(path):
    """(words, code lines, reading minutes) of the Markdown file at `path`."""
    text = Path(path).read_text()
    n = words(text)
    return n, prose_and_code(text)[1], minutes(n)


def shown(path):
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def table(paths):
    lines = [f"Counted by `scripts/chapter_words.py`: hand-written words (no generated blocks, "
             f"tables, code blocks, HTML comments or images), read at {WORDS_PER_MINUTE} words "
             f"a minute.", "",
             "| chapter | words | code lines | reading time |", "|---|---:|---:|---:|"]
    total_words = 0
    for path in paths:
        n, code, mins = count(path)
        total_words += n
        lines.append(f"| {shown(path)} | {n:,} | {code} | {mins} min |")
    if len(paths) > 1:
        lines.append(f"| all | {total_words:,} | | {minutes(total_words)} min |")
    return "\n".join(lines)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        fail(message)


def fail(message):
    print(f"chapter_words: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="Markdown files (default: every stepN_*/README.md)")
    ap.add_argument("--max-words", type=int, metavar="N",
                    help="exit 1 if a chapter has more than N hand-written words")
    args = ap.parse_args()
    if args.max_words is not None and args.max_words <= 0:
        fail(f"--max-words {args.max_words}: must be a positive number of words")
    paths = [Path(f) for f in args.files] or chapters()
    for path in paths:
        if not path.is_file():
            fail(f"{path}: no such file")
        try:
            path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            fail(f"{path}: cannot read it ({e})")
    print(table(paths))
    if args.max_words is not None:
        over = [(shown(p), count(p)[0]) for p in paths if count(p)[0] > args.max_words]
        if over:
            print(f"chapter_words: over {args.max_words:,} words: "
                  + ", ".join(f"{p} ({n:,})" for p, n in over), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        sys.exit(0)
