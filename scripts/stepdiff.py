#!/usr/bin/env python3
"""The kernel diff between two steps, as text or as a side-by-side HTML page for a projector.

    scripts/stepdiff.py 3 4                          # unified diff of the two kernels
    scripts/stepdiff.py step4 step5 --ignore-comments --ignore-space
    scripts/stepdiff.py 4.3 4.4                      # two rungs of step 4's ladder
    scripts/stepdiff.py 4 5 --html step4-5.html      # one self-contained HTML file
    scripts/stepdiff.py --list                       # every step and rung, in course order
    scripts/stepdiff.py --sizes                      # each neighbouring diff's changed code lines

A step is a number (0-6), `stepN`, or its directory name; steps 5 and 6's kernels are
`step5:sm80` (the default) and `step5:sm90a`, and likewise for step 6. A step whose lesson is a
ladder has rungs, `4.1` .. `4.11` (or by name, `4.swizzle`): each a complete kernel, one idea
more than the rung before; the last rung is the step's own kernel (`4` = `4.11`). Step 5's ladder
leads from its sm80 kernel to its sm90a one: `5`, `5.1` .. `5.10`, then `5:sm90a` (= `5.11`);
step 6's passes its sm80 kernel (`6` = `6.11`) on the way to its sm90a one (`6:sm90a` =
`6.12`). What is compared is each kernel's
source file.
Step 0 has no kernel: its streaming loop (step0_reference/streaming.cpp, the online softmax in
plain C++) stands in for it, and the output says so. --list prints every step and rung in
course order, one per line (label, file, the kernel's first comment line), as this script
accepts them; each line's neighbour in the course is the line before it, but for step 6's first
rung, which is read against step 1 (the backward pass starts over as plain kernels).

--ignore-comments drops // and /* */ comments (a line that held only a comment disappears), so
that only code changes remain; --ignore-space compares lines with runs of blanks collapsed.

In the HTML view, each block of changed lines carries the heading of the section of the later
step's chapter (its README.md) that it most likely belongs to: the section whose `code spans` and
code blocks mention the most of the identifiers on the changed lines (ties go to the earlier
section; a block that shares no identifier with any section gets none, and a heading is not
repeated for the next block of the same hunk). It is a heuristic to help a reader find the
explanation, not an authority.
"""
import argparse
import difflib
import html
import re
import sys
from pathlib import Path

from ladders import LADDERS, OWN, VARIANT as LADDER_VARIANT
import markers

ROOT = Path(__file__).resolve().parent.parent
STEPS = ["step0_reference", "step1_naive", "step2_tiled", "step3_fused", "step4_tensorcore",
         "step5_warpspecialized", "step6_backward"]
# step -> {variant: kernel file}; the first variant is the default.
KERNELS = {name: {"": "attention.cu"} for name in STEPS[1:]}
KERNELS["step0_reference"] = {"": "streaming.cpp"}
KERNELS["step5_warpspecialized"] = {"sm80": "attention.cu", "sm90a": "attention_sm90a.cu"}
KERNELS["step6_backward"] = {"sm80": "attention.cu", "sm90a": "attention_sm90a.cu"}
# step -> its ladder, (rung name, kernel file) in course order (scripts/ladders.py).
RUNGS = LADDERS
# step -> the label its first kernel is read against, where that is not the kernel before it in
# the course: the backward pass starts over as plain kernels, one thread per output element, as
# the forward did in step 1, so its first rung is step 1's kernels with the gradients' formulas.
READ_AGAINST = {"step6_backward": "1"}

def course():
    """[(label, previous label or None, step, variant or rung, path)] in course order."""
    out, last = [], None
    for n, step in enumerate(STEPS):
        variants = list(KERNELS[step].items())
        last = READ_AGAINST.get(step, last)
        first = f"{n}"
        own = OWN.get(step, {})
        if step in LADDER_VARIANT and not own:  # the first variant, then the ladder to the other
            out.append((first, last, step, variants[0][0], ROOT / step / variants[0][1]))
            last = first
        for i, (rung, file) in enumerate(RUNGS.get(step, [])[:-1]):
            if rung in own:  # the first variant's kernel, on the ladder's way to the other
                out.append((first, last, step, own[rung], ROOT / step / file))
            else:
                out.append((f"{n}.{i + 1}", last, step, rung, ROOT / step / file))
            last = out[-1][0]
        if step in LADDER_VARIANT:
            variant = LADDER_VARIANT[step]
            out.append((f"{n}:{variant}", last, step, variant, ROOT / step / KERNELS[step][variant]))
            last = first
            continue
        out.append((first, last, step, variants[0][0], ROOT / step / variants[0][1]))
        for variant, file in variants[1:]:
            out.append((f"{n}:{variant}", last, step, variant, ROOT / step / file))
        last = first
    return out


def changed_lines(a, b):
    """Code lines removed plus added between two labels of the course, as the course's rule counts
    them: comments left out and runs of blanks collapsed (--ignore-comments --ignore-space), so
    that code moved into a block, or out of one, counts only where it changed."""
    la, lb = (prepare(resolve(x)[2], True, True) for x in (a, b))
    return sum(1 for line in difflib.unified_diff(la, lb, n=0, lineterm="")
               if line[:1] in "+-" and not line.startswith(("+++", "---")))


def sizes_table():
    """Every neighbouring pair of the course and its changed code lines, as Markdown."""
    lines = ["Generated by `scripts/stepdiff.py --write-sizes`: the code lines each neighbouring "
             "diff changes (`--ignore-comments --ignore-space`, removed plus added); do not edit by "
             "hand.", "",
             "| diff | changed code lines |", "|---|---|"]
    for label, prev, *_ in course():
        if prev is not None:
            lines.append(f"| `{prev} -> {label}` | {changed_lines(prev, label)} |")
    return "\n".join(lines)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        fail(message)


def fail(message):
    print(f"stepdiff: {message}", file=sys.stderr)
    sys.exit(2)


def resolve(text):
    """'4', 'step4', 'step4_tensorcore', 'step5:sm90a', '4.2', '4.swizzle' -> (step directory,
    variant or rung, file)."""
    name, _, variant = text.partition(":")
    name, _, rung = name.partition(".")
    matches = [s for s in STEPS if name in (s, s[:5], s[4])]
    if matches and rung:
        ladder = RUNGS.get(matches[0], [])
        if not ladder:
            fail(f"{matches[0]} has no rungs (steps with a ladder: "
                 f"{', '.join(s[:5] for s in RUNGS)})")
        if variant:
            fail(f"'{text}': a rung has no variants")
        names = [r for r, _ in ladder]
        index = (int(rung) - 1 if rung.isdigit() and 1 <= int(rung) <= len(ladder)
                 else names.index(rung) if rung in names else None)
        if index is None:
            known = ", ".join(f"{matches[0][4]}.{i + 1} ({r})" for i, r in enumerate(names))
            fail(f"{matches[0]} has no rung '{rung}' (rungs: {known})")
        return matches[0], ladder[index][0], ROOT / matches[0] / ladder[index][1]
    if not matches:
        fail(f"unknown step '{text}' (0-6, step0..step6, or a step directory such as "
             f"step4_tensorcore)")
    step = matches[0]
    kernels = KERNELS[step]
    if variant and variant not in kernels:
        known = ", ".join(f"{step[:5]}:{v}" for v in kernels if v) or "none"
        fail(f"{step} has no variant '{variant}' (variants: {known})")
    variant = variant or next(iter(kernels))
    path = ROOT / step / kernels[variant]
    if not path.exists():
        fail(f"{step}:{variant}: {path.relative_to(ROOT)} is not in this checkout")
    return step, variant, path


def strip_comments(lines):
    """Lines without // and /* */ comments; a line that held only a comment is dropped.
    String literals are respected (a // inside quotes is code)."""
    out, in_block = [], False
    for line in lines:
        code, i, in_string = [], 0, False
        had_comment = in_block
        while i < len(line):
            if in_block:
                end = line.find("*/", i)
                if end < 0:
                    i = len(line)
                else:
                    in_block, i = False, end + 2
                continue
            c = line[i]
            if in_string:
                code.append(c)
                if c == "\\" and i + 1 < len(line):
                    code.append(line[i + 1])
                    i += 1
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
                code.append(c)
            elif line.startswith("//", i):
                had_comment = True
                break
            elif line.startswith("/*", i):
                had_comment, in_block = True, True
                i += 2
                continue
            else:
                code.append(c)
            i += 1
        text = "".join(code).rstrip()
        if text.strip() or not had_comment:
            out.append(text)
    return out


def prepare(path, ignore_comments, ignore_space):
    lines = path.read_text().splitlines()
    if ignore_comments:
        lines = strip_comments(lines)
    if ignore_space:
        lines = [" ".join(line.split()) for line in lines]
    return lines


def describe(a, b):
    sa, va, pa = a
    sb, vb, pb = b
    what = f"{pa.relative_to(ROOT)} -> {pb.relative_to(ROOT)}"
    notes = []
    if sa == "step0_reference" or sb == "step0_reference":
        notes.append("step 0 has no kernel: its streaming loop (the online softmax in plain C++) "
                     "is compared with the other step's kernel")
    return what, notes


# Words that say nothing about which section a hunk belongs to.
COMMON = set("""const auto void float double bool true false return static inline template typename
int int64_t uint32_t for while else if constexpr unsigned struct using namespace attn unroll
pragma include define kernel""".split())


def identifiers(lines):
    return {w for line in lines for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]{2,}", line)
            if w not in COMMON}


def chapter_sections(step):
    """[(heading, set of identifiers in its code spans)] of the step's README.md."""
    readme = ROOT / step / "README.md"
    if not readme.exists():
        return []
    sections, heading, spans = [], None, []
    for line in readme.read_text().splitlines() + ["## "]:
        if line.startswith("## "):
            if heading:
                sections.append((heading, identifiers(spans)))
            heading, spans = line[3:].strip(), []
        else:
            spans += re.findall(r"`([^`]+)`", line)
            if line.startswith("    "):  # an indented code block
                spans.append(line)
    return sections


def section_for(changed, sections):
    words = identifiers(changed)
    best, score = None, 0
    for heading, ids in sections:
        n = len(words & ids)
        if n > score:
            best, score = heading, n
    return best


CSS = """body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;width:100%;
table-layout:fixed}td{font-family:monospace;font-size:13px;white-space:pre-wrap;
vertical-align:top;padding:0 4px;word-break:break-all}td.n{width:3em;color:#888;text-align:right}
.del{background:#fdd}.add{background:#dfd}.chg{background:#ffc}
tr.hunk td{background:#eef;font-family:sans-serif;font-size:14px;padding:6px;border-top:2px solid #99c}
tr.sec td{font-family:sans-serif;font-size:13px;color:#336;padding:4px 6px;background:#f4f4fb}
h1{font-size:18px}p.note{color:#555}"""


def html_page(la, lb, context, title, notes, sections):
    sm = difflib.SequenceMatcher(None, la, lb, autojunk=False)
    rows = []
    for group in sm.get_grouped_opcodes(context):
        rows.append(f'<tr class="hunk"><td colspan="4">lines {group[0][1] + 1} / '
                    f'{group[0][3] + 1}</td></tr>')
        shown = None  # the chapter heading shown last in this hunk
        for tag, i1, i2, j1, j2 in group:
            if tag != "equal":
                heading = section_for(la[i1:i2] + lb[j1:j2], sections)
                if heading and heading != shown:
                    rows.append(f'<tr class="sec"><td colspan="4">chapter: <b>'
                                f'{html.escape(heading)}</b></td></tr>')
                    shown = heading
            for k in range(max(i2 - i1, j2 - j1)):
                cells = []
                for lines, start, end, cls in ((la, i1, i2, "del"), (lb, j1, j2, "add")):
                    if start + k >= end:
                        cells.append('<td class="n"></td><td></td>')
                        continue
                    kind = {"equal": "", "replace": "chg"}.get(tag, cls)
                    cells.append(f'<td class="n">{start + k + 1}</td>'
                                 f'<td class="{kind}">{html.escape(lines[start + k])}</td>')
                rows.append("<tr>" + "".join(cells) + "</tr>")
    if not rows:
        rows.append('<tr class="hunk"><td colspan="4">no differences</td></tr>')
    note = "".join(f'<p class="note">{html.escape(n)}</p>' for n in notes)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
            f"</title><style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>{note}"
            f"<table><colgroup><col style=\"width:3em\"><col><col style=\"width:3em\"><col>"
            f"</colgroup>\n" + "\n".join(rows) + "\n</table></body></html>\n")


def main():
    parser = OneLineParser(description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", nargs="?",
                        help="the earlier step (0-6, stepN, a directory, step5:sm90a, 4.2)")
    parser.add_argument("b", nargs="?", help="the later step")
    parser.add_argument("--list", action="store_true",
                        help="every step and rung in course order, one per line")
    parser.add_argument("--sizes", action="store_true",
                        help="every neighbouring pair's changed code lines, as a Markdown table")
    parser.add_argument("--write-sizes", metavar="MARKDOWN",
                        help="write that table between the file's diffsizes markers")
    parser.add_argument("--ignore-comments", action="store_true")
    parser.add_argument("--ignore-space", action="store_true")
    parser.add_argument("--context", type=int, default=3, help="lines of context (default 3)")
    parser.add_argument("--html", metavar="OUT.html", help="write a side-by-side HTML page")
    args = parser.parse_args()
    if args.list:
        if args.a or args.b:
            fail("--list takes no steps")
        for label, _, step, _, path in course():
            first = path.read_text().splitlines()[0].removeprefix("//").strip()
            print(f"{label:8s} {path.relative_to(ROOT)!s:40s} {first}")
        return 0
    if args.sizes or args.write_sizes:
        if args.a or args.b:
            fail("--sizes takes no steps")
        if args.write_sizes:
            markers.check(args.write_sizes, "diffsizes")
        table = sizes_table()
        if args.write_sizes:
            markers.rewrite(args.write_sizes, "diffsizes", table)
            print(f"stepdiff: wrote the table into {args.write_sizes}")
        else:
            print(table)
        return 0
    if not args.a or not args.b:
        fail("two steps to compare, e.g. 3 4 (or --list)")
    if args.context < 0:
        fail("--context must be 0 or more")
    a, b = resolve(args.a), resolve(args.b)
    la = prepare(a[2], args.ignore_comments, args.ignore_space)
    lb = prepare(b[2], args.ignore_comments, args.ignore_space)
    what, notes = describe(a, b)
    if args.html:
        out = Path(args.html)
        if not out.parent.is_dir():
            fail(f"--html {out}: directory {out.parent} does not exist")
        title = f"{a[0]}{':' + a[1] if a[1] else ''} -> {b[0]}{':' + b[1] if b[1] else ''}: {what}"
        try:
            out.write_text(html_page(la, lb, args.context, title, notes,
                                     chapter_sections(b[0])))
        except OSError as e:
            fail(f"--html {out}: {e.strerror}")
        print(f"stepdiff: wrote {out}")
        return 0
    print(f"# {what}" + ("".join(f"\n# {n}" for n in notes)))
    for line in difflib.unified_diff(la, lb, str(a[2].relative_to(ROOT)),
                                     str(b[2].relative_to(ROOT)), n=args.context, lineterm=""):
        print(line)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `stepdiff.py 3 4 | head`
        sys.exit(0)
