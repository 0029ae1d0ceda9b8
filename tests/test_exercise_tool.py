"""scripts/exercise.py's own behaviour: the list, start/solve round trip, refusals (exit 2)."""
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import exercise  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "exercise.py"), *args],
                          capture_output=True, text=True)


class ExerciseTool(unittest.TestCase):
    def test_at_least_twelve_exercises_over_steps_1_to_6(self):
        rows = run("list").stdout.splitlines()
        self.assertGreaterEqual(len(rows), 12)
        steps = {row.split()[1] for row in rows}
        self.assertEqual(steps, {"step1_naive", "step2_tiled", "step3_fused",
                                 "step4_tensorcore", "step5_warpspecialized", "step6_backward"})

    def test_every_blank_is_in_its_step_once_and_leaves_it(self):
        for name in exercise.names():
            spec = exercise.load(name)
            source = spec["source"].read_text()
            exercise.locate(spec, source)  # raises if a blank is not there exactly once
            text = exercise.blanked(spec)
            for blank in spec["blank"]:
                self.assertNotIn("\n".join(blank["lines"]), text, name)
            self.assertEqual(exercise.filled(spec, text), source, name)

    def test_the_readme_lists_every_exercise(self):
        readme = (ROOT / "exercises" / "README.md").read_text()
        for name in exercise.names():
            self.assertIn(f"| `{name}` |", readme)

    def test_a_changed_step_is_refused(self):
        spec = exercise.load("step3_online_softmax")
        with self.assertRaises(exercise.Refusal):
            exercise.locate(spec, spec["source"].read_text().replace("rescale_to(", "rescale("))
        # Blanks listed out of the file's order would be cut out at each other's places.
        spec = exercise.load("step6_tile_pairs")
        spec["blank"].reverse()
        with self.assertRaisesRegex(exercise.Refusal, "in the order of the file"):
            exercise.locate(spec, spec["source"].read_text())

    def test_start_and_solve_in_a_workspace(self):
        with tempfile.TemporaryDirectory() as ws:
            r = run("start", "step2_output_barriers", "--dir", ws)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("exercise blank 1 of 2", Path(ws, "attention.cu").read_text())
            again = run("start", "step2_output_barriers", "--dir", ws)
            self.assertEqual(again.returncode, 2)
            self.assertEqual(run("solve", "step2_output_barriers", "--dir", ws).returncode, 0)
            self.assertEqual(Path(ws, "attention.cu").read_text(),
                             (ROOT / "step2_tiled" / "attention.cu").read_text())

    def test_an_answer_of_ones_own_is_compiled_and_checked(self):
        # A solved exercise is the step's own file, and check runs the step's binary for it
        # (exercise_test.py's "solved" tests); one with any other text is compiled and linked with
        # the step's own commands, and a right one passes.
        build = os.environ.get("ATTN_BUILD_DIR")
        if not build or not (Path(build) / "bin" / "step1_naive").exists():
            self.skipTest("needs a build (ATTN_BUILD_DIR)")
        with tempfile.TemporaryDirectory() as ws:
            self.assertEqual(run("start", "step1_row_softmax", "--dir", ws).returncode, 0)
            self.assertEqual(run("solve", "step1_row_softmax", "--dir", ws).returncode, 0)
            kernel = Path(ws, "attention.cu")
            r = run("check", "step1_row_softmax", "--dir", ws, "--build", build, "--no-build")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("step1_naive/attention.cu itself", r.stdout)
            kernel.write_text(kernel.read_text() + "// my own notes\n")
            r = run("check", "step1_row_softmax", "--dir", ws, "--build", build, "--no-build")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertNotIn("itself", r.stdout)
            self.assertIn("PASS: step1_row_softmax", r.stdout)
            self.assertTrue(Path(ws, ".build", "step1_naive").exists())

    def test_an_unswizzled_answer_fails_on_its_bank_conflicts(self):
        # step4_swizzle is checked on counts: a layout without the swizzle computes the right
        # result (writer and reader agree) and must still fail, naming the conflicts.
        build = os.environ.get("ATTN_BUILD_DIR")
        if not build or not (Path(build) / "bin" / "counted" / "step4_tensorcore").exists():
            self.skipTest("needs a build with counted copies (ATTN_BUILD_DIR, g++)")
        with tempfile.TemporaryDirectory() as ws:
            self.assertEqual(run("start", "step4_swizzle", "--dir", ws).returncode, 0)
            kernel = Path(ws, "attention.cu")
            text = exercise.filled(exercise.load("step4_swizzle"), kernel.read_text())
            plain = text.replace("(((d % 64) / 8) ^ (r % 8)) * 8 + d % 8", "d % 64")
            self.assertNotEqual(plain, text)
            kernel.write_text(plain)
            r = run("check", "step4_swizzle", "--dir", ws, "--build", build, "--no-build")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("the result is right, but the layout has bank conflicts", r.stdout)
            self.assertIn("in ldmatrix (D=64)", r.stdout)

    def test_an_answer_that_masks_every_tile_fails_on_its_count(self):
        # step4_unmasked_tiles is about work left out: an answer that masks every tile computes
        # the right result and must still fail on the masked path's count (gcov, g++ only), and
        # a right answer of one's own passes it.
        build = os.environ.get("ATTN_BUILD_DIR")
        if not build or not (Path(build) / "bin" / "step4_tensorcore").exists():
            self.skipTest("needs a build (ATTN_BUILD_DIR)")
        spec = exercise.load("step4_unmasked_tiles")
        missing = exercise.gcov_missing(exercise.ninja_commands(Path(build), spec["step"])[0])
        if missing:
            self.skipTest(missing)
        with tempfile.TemporaryDirectory() as ws:
            self.assertEqual(run("start", "step4_unmasked_tiles", "--dir", ws).returncode, 0)
            kernel = Path(ws, "attention.cu")
            right = exercise.filled(spec, kernel.read_text()) + "// my own notes\n"
            strict = right.replace("min(attn::row_keys_end(p, b, i0) / Bc, n_tiles);", "0;")
            self.assertNotEqual(strict, right)
            check = ("check", "step4_unmasked_tiles", "--dir", ws, "--build", build, "--no-build",
                     "--first-case")
            kernel.write_text(strict)
            r = run(*check)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("the result is right, but the kernel took the masked path more often",
                          r.stdout)
            kernel.write_text(right)
            r = run(*check)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("PASS: step4_unmasked_tiles (the first case, its masked path counted)",
                          r.stdout)
            kernel.write_text(right.replace(line := spec["count"]["line"], line + " "))
            r = run(*check)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("is not in", r.stdout)
        # step6_tile_pairs counts the warp tiles its two kernels mask: dq_kernel's answer that
        # calls no tile all visible fails too.
        with tempfile.TemporaryDirectory() as ws:
            self.assertEqual(run("start", "step6_tile_pairs", "--dir", ws).returncode, 0)
            kernel = Path(ws, "attention.cu")
            right = exercise.filled(exercise.load("step6_tile_pairs"), kernel.read_text())
            strict = right.replace("? attn::row_keys_end(p, b, w0) : 0;", "? 0 : 0;")
            self.assertNotEqual(strict, right)
            kernel.write_text(strict)
            r = run("check", "step6_tile_pairs", "--dir", ws, "--build", build, "--no-build",
                    "--first-case")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("the result is right, but the kernel took the masked path more often",
                          r.stdout)

    def test_a_case_past_its_timeout_fails_in_one_message(self):
        # An answer whose loop never ends fails when its case runs out of time (--timeout), with
        # the case and a hint, not a traceback; a step's own binary given no time at all shows it.
        build = os.environ.get("ATTN_BUILD_DIR")
        if not build or not (Path(build) / "bin" / "step1_naive").exists():
            self.skipTest("needs a build (ATTN_BUILD_DIR)")
        with tempfile.TemporaryDirectory() as ws:
            self.assertEqual(run("start", "step1_row_softmax", "--dir", ws).returncode, 0)
            self.assertEqual(run("solve", "step1_row_softmax", "--dir", ws).returncode, 0)
            r = run("check", "step1_row_softmax", "--dir", ws, "--build", build, "--no-build",
                    "--first-case", "--timeout", "0.001")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("did not finish in 0.001 s", r.stdout)
            self.assertNotIn("Traceback", r.stdout + r.stderr)

    def test_bad_input_is_one_line_and_exit_2(self):
        with tempfile.TemporaryDirectory() as ws:
            empty = str(Path(ws) / "nothing")
            for args in (["start", "no_such_exercise"], ["check", "step3_epilogue", "--dir", empty],
                         ["check", "step3_epilogue", "--timeout", "0"],
                         ["bogus"], [], ["start", "../etc/passwd"]):
                r = run(*args)
                self.assertEqual(r.returncode, 2, args)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)


if __name__ == "__main__":
    unittest.main()
