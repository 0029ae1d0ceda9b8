"""scripts/steps_table.py: the steps table in README.md, docs/README.md and docs/architecture.md is
what the code and the chapters say, its three copies agree, a stale copy fails, bad input."""
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "steps_table.py"
sys.path.insert(0, str(ROOT / "scripts"))
import steps_table  # noqa: E402
from ladders import LADDERS  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def rows(page, name):
    """The cells of each row of the Markdown table in NAME's block of `page` (header left out)."""
    body = steps_table.block((ROOT / page).read_text(), name)
    table = [line for line in body.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in table]


def link_text(cell):
    m = re.fullmatch(r"\[(.+)\]\([^)]+\)", cell)
    return m.group(1) if m else cell


class StepsTable(unittest.TestCase):
    def test_every_copy_is_what_the_code_makes(self):
        r = run("--check")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")

    def test_the_three_copies_agree(self):
        # Read back from the pages, not from the generator: the same steps in the same order, the
        # same idea for each, the same rungs.
        readme = rows("README.md", "steps")
        path = rows("docs/README.md", "steps-path")
        arch = rows("docs/architecture.md", "steps-rungs")
        arch_steps = [r for r in arch if r[0].startswith("**")]
        self.assertEqual(len(readme), len(steps_table.STEPS))
        self.assertEqual(len(path), len(readme))
        self.assertEqual(len(arch_steps), len(readme))
        for n, (a, b, c) in enumerate(zip(readme, path, arch_steps)):
            step = steps_table.STEPS[n]
            self.assertEqual(link_text(a[0]), step)
            self.assertEqual(b[0], str(n))
            self.assertIn(f"`{step}`", c[0])
            self.assertEqual(a[1], link_text(b[1]), step)  # the idea, word for word
            self.assertTrue(c[2].startswith(a[1]), (step, c[2]))
            # The rungs: architecture.md's rows under this step, the path's names, the README's
            # range, and scripts/ladders.py.
            start = arch.index(c)
            rungs = []
            for r in arch[start + 1:]:
                if r[0].startswith("**"):
                    break
                rungs.append(re.match(r"(\d+\.\d+) `(\w+)`", r[0]).groups())
            self.assertEqual([name for _, name in rungs], [r for r, _ in LADDERS.get(step, [])])
            self.assertEqual(re.findall(r"(\d+\.\d+) `(\w+)`", b[2]), rungs, step)
            if rungs:
                self.assertTrue(a[2].startswith(f"{rungs[0][0]}-{rungs[-1][0]}"), (step, a[2]))
            else:
                self.assertEqual(a[2], "-")

    def test_the_readme_copy_is_compact(self):
        for row in rows("README.md", "steps"):
            for cell in row:
                self.assertLessEqual(len(cell), 200, cell)

    def test_a_copy_edited_by_hand_fails(self):
        with tempfile.TemporaryDirectory() as tmp:
            pages = []
            for rel, name, form in steps_table.PAGES:
                copy = Path(tmp) / rel.replace("/", "_")
                shutil.copy(ROOT / rel, copy)
                pages.append((str(copy), name, form))
            table = steps_table.steps()
            self.assertEqual(steps_table.stale(pages, table), [])
            edited = Path(pages[1][0])
            edited.write_text(edited.read_text().replace("4.1 `mma`", "4.1 `mmaa`", 1))
            problems = steps_table.stale(pages, table)
            self.assertEqual(len(problems), 1, problems)
            self.assertIn(str(edited), problems[0])
            self.assertIn("run scripts/steps_table.py --write", problems[0])
            unmarked = Path(pages[0][0])
            unmarked.write_text("no markers\n")
            err = io.StringIO()
            with self.assertRaises(SystemExit) as e, contextlib.redirect_stderr(err):
                steps_table.stale(pages, table)
            self.assertEqual(e.exception.code, 2)
            self.assertIn("no <!-- steps:begin -->", err.getvalue())

    def test_a_rung_the_ladders_do_not_know_is_refused(self):
        saved = steps_table.LADDERS["step2_tiled"]
        steps_table.LADDERS["step2_tiled"] = [saved[0], ("shuffles", "rung2_warps.cu"), *saved[2:]]
        try:
            with self.assertRaises(steps_table.Disagree) as e:
                steps_table.steps()
            self.assertIn("step2_tiled/step.cpp", str(e.exception))
        finally:
            steps_table.LADDERS["step2_tiled"] = saved

    def test_the_rung_ideas_are_what_the_binaries_print(self):
        # What steps_table.py reads from step.cpp against each step's --help (StepInfo::rungs).
        bindir = os.environ.get("ATTN_BIN_DIR")
        if not bindir:
            self.skipTest("ATTN_BIN_DIR not set (CTest sets it)")
        for step in LADDERS:
            text = subprocess.run([os.path.join(bindir, step), "--help"], capture_output=True,
                                  text=True).stdout
            listed = re.findall(r"^\s+\d+ (\w+): (.+)$", text, re.M)
            self.assertEqual(listed, steps_table.rung_ideas(step), step)

    def test_bad_input_is_one_line_and_exit_2(self):
        for args in (["--write", "--check"], ["--nope"], ["extra"]):
            r = run(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertEqual(r.stdout, "", args)


if __name__ == "__main__":
    unittest.main()
