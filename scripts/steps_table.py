#!/usr/bin/env python3
"""The steps table: every step of the course in order, its one idea, its rungs, generated from the
code into the three pages that show it, each in its own form between its markers:

    README.md              <!-- steps:begin -->        one row per step: the idea, the rungs as a
                                                       range, the GPU it needs (compact)
    docs/README.md         <!-- steps-path:begin -->   the path: one row per step with its chapter,
                                                       its rungs by name, its reading time and its
                                                       exercises
    docs/architecture.md   <!-- steps-rungs:begin -->  one row per step and per rung: its kernel
                                                       file and the idea it adds

    scripts/steps_table.py             # print the three forms
    scripts/steps_table.py --write     # rewrite the three blocks
    scripts/steps_table.py --check     # exit 1 naming each block that is not what --write writes

Nothing in it is typed here; each fact has one source:
- the course order and each rung's kernel file: scripts/ladders.py, in the order of
  `scripts/stepdiff.py --list` (stepdiff.course());
- a step's one idea: its chapter's title (the first line of stepN_*/README.md, "# Step N: IDEA");
- a rung's one idea: the line the step's `--rung` help prints for it (the `idea` of each rung in
  StepInfo::rungs, stepN_*/step.cpp), read from the source so that no build is needed
  (tests/test_steps_table.py holds it to the binaries' --help where a build is there);
- the GPU a step needs: StepInfo::min_arch and ::variants in its step.cpp, else the oldest
  architecture of CMakeLists.txt's default list; step 0 has no GPU code;
- a chapter's reading time: scripts/chapter_words.py;
- a step's exercises: exercises/*.toml (scripts/exercise.py), placed at the rung whose kernel
  they blank.

Exit status: 0; 1 when --check finds a stale block, or when the sources disagree (a step.cpp's
rungs that are not scripts/ladders.py's); 2 for bad input (a page without its markers).
"""
import argparse
import re
import sys
from pathlib import Path

import chapter_words
import exercise
import markers
from ladders import LADDERS, OWN, VARIANT
from stepdiff import KERNELS, STEPS, course

ROOT = Path(__file__).resolve().parent.parent
LITERAL = r'"(?:[^"\\\n]|\\.)*"'
# A rung in StepInfo::rungs: its name, then its idea (adjacent literals, as C++ joins them).
RUNG = re.compile(rf"({LITERAL})\s*,\s*((?:{LITERAL}\s*)+),")


class Disagree(Exception):
    """Two sources of the table disagree: the code, not the input, needs fixing."""


def unquote(literal):
    return re.sub(r"\\(.)", r"\1", literal[1:-1])


def step_cpp(step):
    """The step's step.cpp with its comments blanked (string literals kept); "" if it has none."""
    path = ROOT / step / "step.cpp"
    if not path.exists():
        return ""
    return re.sub(rf"({LITERAL})|//[^\n]*|/\*.*?\*/", lambda m: m.group(1) or " ",
                  path.read_text(), flags=re.S)


def rung_ideas(step):
    """[(rung name, idea)] from StepInfo::rungs in the step's step.cpp, in its order."""
    text = step_cpp(step)
    start = re.search(r"\brungs\s*=\s*\{", text)
    if not start:
        return []
    depth, i = 0, start.end() - 1
    for token in re.finditer(rf"{LITERAL}|[{{}}]", text[i:]):  # the braces outside literals
        depth += {"{": 1, "}": -1}.get(token.group(0), 0)
        if depth == 0:
            block = text[i:i + token.end()]
            break
    else:
        raise Disagree(f"{step}/step.cpp: its rungs = {{ ... }} does not close")
    return [(unquote(name), "".join(unquote(s) for s in re.findall(LITERAL, idea)))
            for name, idea in RUNG.findall(block)]


def chapter_title(step):
    """The one idea of a step: its chapter's title, after "# Step N: "."""
    first = (ROOT / step / "README.md").read_text().split("\n", 1)[0]
    m = re.fullmatch(r"# Step \d+: (.+)", first.strip())
    if not m:
        raise Disagree(f"{step}/README.md: its first line is not '# Step {step[4]}: ...'")
    return m.group(1)


def oldest_default_arch():
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r'set\(CMAKE_CUDA_ARCHITECTURES "([^"]+)"\)', text)
    if not m:
        raise Disagree("CMakeLists.txt: no default CMAKE_CUDA_ARCHITECTURES")
    return min(int(re.match(r"\d+", a).group(0)) for a in m.group(1).split(";"))


def gpu_needed(step):
    """The GPU a step's kernels need, e.g. "sm_80+; `--variant sm90a`: sm_90a"."""
    text = step_cpp(step)
    if not text or not list((ROOT / step).glob("*.cu")):
        return "none (C++ on the CPU)"
    m = re.search(rf"\.min_arch\s*=\s*({LITERAL})", text)
    oldest = unquote(m.group(1)) if m else f"sm_{oldest_default_arch()}"
    parts = [f"{oldest}+"]
    variants = re.search(r"\.variants\s*=\s*\{([^}]*)\}", text)
    for v in re.findall(LITERAL, variants.group(1)) if variants else []:
        arch = re.sub(r"^sm(\d)", r"sm_\1", unquote(v))
        if arch != oldest:
            parts.append(f"`--variant {unquote(v)}`: {arch}")
    return "; ".join(parts)


def steps():
    """Every step in course order: a dict of what the three forms show of it."""
    ideas = {}
    for step in STEPS:
        ideas[step] = rung_ideas(step)
        ladder = [r for r, _ in LADDERS.get(step, [])]
        if [r for r, _ in ideas[step]] != ladder:
            raise Disagree(f"{step}/step.cpp's rungs {[r for r, _ in ideas[step]]} are not "
                           f"scripts/ladders.py's {ladder}")
    try:
        specs = [exercise.load(name) for name in exercise.names()]
    except exercise.Refusal as e:
        raise Disagree(str(e)) from None
    labels = {path: label for label, _, _, _, path in course()}
    order = [path for *_, path in course()]
    out = []
    for n, step in enumerate(STEPS):
        ladder = LADDERS.get(step, [])
        variants = list(KERNELS[step].items())
        first = variants[0][1] if ((step in VARIANT and step not in OWN) or not ladder) else None
        rungs = [{"label": f"{n}.{i + 1}", "name": name, "file": file, "idea": idea,
                  "course": labels[ROOT / step / file]}
                 for i, ((name, file), (_, idea)) in enumerate(zip(ladder, ideas[step]))]
        # Where an exercise sits: its rung ("4.3"), the kernel before the ladder (step 5's
        # "sm80"), or the step (a step without a ladder); in course order.
        at = {ROOT / step / r["file"]: r["label"] for r in rungs}
        at.setdefault(ROOT / step / variants[0][1], variants[0][0] or f"{n}")
        exercises = sorted((order.index(spec["source"]), at[spec["source"]], spec["name"])
                           for spec in specs if spec["step"] == step)
        words, _, minutes = chapter_words.count(ROOT / step / "README.md")
        out.append({"n": n, "step": step, "idea": chapter_title(step), "rungs": rungs,
                    "first": first, "first_variant": variants[0][0], "variant": VARIANT.get(step), "own": OWN.get(step, {}),
                    "gpu": gpu_needed(step), "words": words, "minutes": minutes,
                    "exercises": [(label, name) for _, label, name in exercises]})
    return out


def rung_range(s):
    if not s["rungs"]:
        return "-"
    span = f"{s['rungs'][0]['label']}-{s['rungs'][-1]['label']}"
    if s["own"]:  # the ladder passes a variant's kernel on its way to the other's
        at = [f"`{s['own'][r['name']]}` at {r['label']}" for r in s["rungs"] if r["name"] in s["own"]]
        span += f" ({', '.join(at)}, `{s['variant']}` at {s['rungs'][-1]['label']})"
    elif s["variant"]:
        span += f", `{s['first_variant']}` to `{s['variant']}`"
    return span


def compact(rows):
    """README.md's form."""
    lines = ["Generated by `scripts/steps_table.py --write` from the chapters and the code; do not "
             "edit by hand. Every step also runs on the CPU backend, no GPU needed; each rung is a "
             "complete kernel, one idea more than the one before.", "",
             "| step | the idea | rungs | GPU it needs |", "|---|---|---|---|"]
    for s in rows:
        lines.append(f"| [{s['step']}]({s['step']}/README.md) | {s['idea']} | {rung_range(s)} | "
                     f"{s['gpu']} |")
    return "\n".join(lines)


def path_form(rows):
    """docs/README.md's form: the path."""
    lines = ["Generated by `scripts/steps_table.py --write` from the chapters, the code and the "
             "exercises; do not edit by hand. Reading time: the chapter's hand-written words at "
             f"{chapter_words.WORDS_PER_MINUTE} a minute (`scripts/chapter_words.py`).", "",
             "| step | the chapter | rungs | reading | exercises |", "|---|---|---|---|---|"]
    for s in rows:
        rungs = ", ".join(f"{r['label']} `{r['name']}`" + (f" (`{s['own'][r['name']]}`)"
                                                            if r["name"] in s["own"] else "")
                          for r in s["rungs"]) or "-"
        if s["own"]:
            rungs += f" (`{s['variant']}`)"
        elif s["variant"]:
            rungs = f"`{s['first_variant']}`, then {rungs} (`{s['variant']}`)"
        ladder = bool(s["rungs"])
        exercises = ", ".join(f"`{name}`" + (f" ({label})" if ladder else "")
                              for label, name in s["exercises"]) or "-"
        lines.append(f"| {s['n']} | [{s['idea']}](../{s['step']}/README.md) | {rungs} | "
                     f"{s['minutes']} min | {exercises} |")
    total = sum(s["words"] for s in rows)
    lines += ["", f"All {len(rows)} chapters: {total:,} words, {chapter_words.minutes(total)} min "
              f"of reading; {sum(len(s['exercises']) for s in rows)} exercises."]
    return "\n".join(lines)


def rungs_form(rows):
    """docs/architecture.md's form: every step and rung."""
    lines = ["Generated by `scripts/steps_table.py --write` from the chapters' titles and each "
             "step's `StepInfo::rungs` (what `--rung` lists); do not edit by hand. The last rung "
             "of a ladder is the step's own kernel.", "",
             "| step, rung | kernel file | the idea it adds |", "|---|---|---|"]
    for s in rows:
        head = f"**{s['n']}** [`{s['step']}`](../{s['step']}/README.md)"
        if s["first"]:
            kernel = f"`{s['first']}`" + (f" (`{s['first_variant']}`)" if s["variant"] else "")
        else:
            kernel = ""
        idea = s["idea"]
        if s["rungs"]:
            to = f" to `{s['variant']}`" if s["variant"] else ""
            idea += f"; a ladder of {len(s['rungs'])} rungs{to}"
        lines.append(f"| {head} | {kernel} | {idea} |")
        for r in s["rungs"]:
            same = f" (= `{r['course']}`)" if r["course"] != r["label"] else ""
            lines.append(f"| {r['label']} `{r['name']}`{same} | `{r['file']}` | {r['idea']} |")
    return "\n".join(lines)


PAGES = [("README.md", "steps", compact), ("docs/README.md", "steps-path", path_form),
         ("docs/architecture.md", "steps-rungs", rungs_form)]


def block(text, name):
    """What stands between NAME's markers in `text`, or None."""
    m = re.search(rf"<!-- {re.escape(name)}:begin -->\n(.*?)\n<!-- {re.escape(name)}:end -->",
                  text, re.S)
    return m.group(1) if m else None


def stale(pages, rows):
    """A line for each page whose block is not what --write writes ([] if none)."""
    out = []
    for path, name, form in pages:
        markers.check(path, name)
        if block(Path(path).read_text(), name) != form(rows):
            out.append(f"steps_table: {path}'s {name} block is stale: run scripts/steps_table.py "
                       f"--write")
    return out


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        markers.refuse(f"steps_table: {message}")


def main():
    ap = OneLineParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the three blocks")
    mode.add_argument("--check", action="store_true", help="exit 1 if a block is stale")
    args = ap.parse_args()
    pages = [(str(ROOT / rel), name, form) for rel, name, form in PAGES]
    try:
        rows = steps()
    except Disagree as e:
        print(f"steps_table: {e}", file=sys.stderr)
        return 1
    if args.check:
        problems = stale(pages, rows)
        for line in problems:
            print(line, file=sys.stderr)
        return 1 if problems else 0
    if args.write:
        for path, name, _ in pages:
            markers.check(path, name)
        for path, name, form in pages:
            markers.rewrite(path, name, form(rows))
            print(f"steps_table: wrote the {name} block of {Path(path).relative_to(ROOT)}")
        return 0
    for path, name, form in pages:
        print(f"<!-- {Path(path).relative_to(ROOT)}: {name} -->\n{form(rows)}\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        sys.exit(0)
