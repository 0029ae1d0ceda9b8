"""scripts/stepdiff.py: every neighbouring pair in text and HTML, comments ignored, bad input."""
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "stepdiff.py"
sys.path.insert(0, str(ROOT / "scripts"))
import stepdiff  # noqa: E402

# Every neighbouring pair of the course (steps and rungs, scripts/stepdiff.py --list).
PAIRS = [(prev, lab) for lab, prev, *_ in stepdiff.course() if prev is not None]


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def changed(diff):
    return [line[1:] for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


class StepDiff(unittest.TestCase):
    def test_one_idea_per_diff(self):
        # A rung's diff: at most 80 changed code lines. A step's first diff (from the step before
        # it): at most 150, where its chapter says why it is longer.
        self.assertIn(("1", "6.1"), PAIRS)  # the backward's first rung, read against step 1
        for a, b in PAIRS:
            n = stepdiff.changed_lines(a, b)
            step_a, step_b = stepdiff.resolve(a)[0], stepdiff.resolve(b)[0]
            if step_a == step_b:
                self.assertLessEqual(n, 80, (a, b))
                continue
            self.assertLessEqual(n, 150, (a, b))
            if n > 80:
                chapter = (ROOT / step_b / "README.md").read_text()
                self.assertIn(f"The diff `{a} -> {b}` is longer than a rung's 80 lines", chapter,
                              (a, b, n))

    def test_the_sizes_table_is_the_code(self):
        text = (ROOT / "docs" / "architecture.md").read_text()
        self.assertIn(stepdiff.sizes_table(), text, "run scripts/stepdiff.py --write-sizes "
                      "docs/architecture.md")
        r = run("--write-sizes", str(ROOT / "no_such.txt"))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)

    def test_every_neighbouring_pair_as_text(self):
        for a, b in PAIRS:
            r = run(a, b)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.startswith("# "), r.stdout[:200])
            self.assertIn("@@", r.stdout)
            self.assertGreater(len(changed(r.stdout)), 5, (a, b))
        self.assertIn("step 0 has no kernel", run("0", "1").stdout)
        for pair in [("1", "2.1"), ("2.2", "2"), ("2", "3"), ("3", "4.1"), ("4.1", "4.2"),
                     ("4.10", "4"), ("4", "5"), ("5", "5.1"), ("5.10", "5:sm90a"),
                     ("6.10", "6"), ("6", "6:sm90a")]:
            self.assertIn(pair, PAIRS)
        self.assertEqual(run("4.3", "4.swizzle").stdout, run("4.3", "4.4").stdout)
        self.assertEqual(run("4.11", "4").stdout.count("\n@@"), 0)  # the last rung is the step
        self.assertEqual(run("5.11", "5:sm90a").stdout.count("\n@@"), 0)  # step 5's: its sm90a
        self.assertEqual(run("6.11", "6").stdout.count("\n@@"), 0)  # step 6's passes its sm80
        self.assertEqual(run("6.12", "6:sm90a").stdout.count("\n@@"), 0)

    def test_list_is_the_course_in_order(self):
        r = run("--list")
        self.assertEqual(r.returncode, 0, r.stderr)
        labels = [line.split()[0] for line in r.stdout.splitlines()]
        self.assertEqual(labels[:7], ["0", "1", "2.1", "2.2", "2", "3", "4.1"])
        self.assertEqual(labels[-25:], ["4", "5", "5.1", "5.2", "5.3", "5.4", "5.5", "5.6", "5.7",
                                        "5.8", "5.9", "5.10", "5:sm90a",
                                        "6.1", "6.2", "6.3", "6.4", "6.5", "6.6", "6.7", "6.8",
                                        "6.9", "6.10", "6", "6:sm90a"])
        for lab in labels:  # every label it lists, it accepts
            self.assertEqual(run(lab, lab).returncode, 0, lab)

    def test_the_ladders_are_the_steps_own(self):
        # scripts/ladders.py against each step's --rung list (StepInfo::rungs in step.cpp).
        from ladders import LADDERS
        bindir = os.environ.get("ATTN_BIN_DIR")
        if not bindir:
            self.skipTest("ATTN_BIN_DIR not set (CTest sets it)")
        for step, rungs in LADDERS.items():
            text = subprocess.run([os.path.join(bindir, step), "--help"], capture_output=True,
                                  text=True).stdout
            listed = re.findall(r"^\s+(\d+) (\w+): ", text, re.M)
            self.assertEqual(listed, [(str(i + 1), r) for i, (r, _) in enumerate(rungs)], step)
            for _, file in rungs:
                self.assertTrue((ROOT / step / file).exists(), file)

    def test_every_neighbouring_pair_as_html(self):
        with tempfile.TemporaryDirectory() as tmp:
            for a, b in PAIRS:
                out = os.path.join(tmp, f"{a}-{b}.html")
                r = run(f"step{a}", f"step{b}", "--html", out)
                self.assertEqual(r.returncode, 0, r.stderr)
                page = Path(out).read_text()
                self.assertIn("<table", page)
                self.assertIn("chapter: <b>", page)  # a chapter heading beside some hunk
                for external in ("src=", "href=", "http://", "https://"):
                    self.assertNotIn(external, page)  # self-contained

    def test_ignore_comments_leaves_only_code(self):
        plain = changed(run("3", "4").stdout)
        code = changed(run("3", "4", "--ignore-comments").stdout)
        self.assertTrue(any(line.strip().startswith("//") for line in plain))
        self.assertFalse(any("//" in line and '"' not in line for line in code))
        self.assertLess(len(code), len(plain))

    def test_strip_comments_keeps_strings_and_code(self):
        got = stepdiff.strip_comments([
            'x = 1;  // one', '// only a comment', 'const char* s = "a // b";',
            'y = 2; /* start', 'still comment */ z = 3;', '', '/* one line */'])
        self.assertEqual(got, ['x = 1;', 'const char* s = "a // b";', 'y = 2;', ' z = 3;', ''])

    def test_ignore_space(self):
        self.assertEqual(stepdiff.prepare(ROOT / "step3_fused" / "attention.cu", False, True)[0],
                         " ".join((ROOT / "step3_fused" / "attention.cu").read_text()
                                  .splitlines()[0].split()))

    def test_bad_input_is_one_line_and_exit_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            missing_dir = os.path.join(tmp, "no", "x.html")
            for args in (["9", "4"], ["4"], ["4", "5:nope"], ["4", "5", "--html", missing_dir],
                         ["4", "5", "--context", "-1"], ["step4_tensorcorex", "5"],
                         ["4.12", "4"], ["3.1", "4"], ["4.nope", "4"], ["4.1:sm80", "4"],
                         ["--list", "4"]):
                r = run(*args)
                self.assertEqual(r.returncode, 2, args)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)


if __name__ == "__main__":
    unittest.main()
