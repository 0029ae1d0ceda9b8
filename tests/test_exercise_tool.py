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
    def build(self, binary="step1_naive", why="needs a build (ATTN_BUILD_DIR)"):
        """The build the checks reuse (ATTN_BUILD_DIR); the test is skipped without bin/BINARY."""
        build = os.environ.get("ATTN_BUILD_DIR")
        if not build or not (Path(build) / "bin" / binary).exists():
            self.skipTest(why)
        return build

    def answer(self, ws, name, edit=None):
        """Exercise NAME started in ws and answered with its step's own lines, changed by `edit`
        (which must change them): the kernel file."""
        self.assertEqual(run("start", name, "--dir", ws).returncode, 0)
        kernel = Path(ws, "attention.cu")
        text = exercise.filled(exercise.load(name), kernel.read_text())
        if edit:
            self.assertNotEqual(edit(text), text, "the edit changes nothing")
            text = edit(text)
        kernel.write_text(text)
        return kernel

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
        build = self.build()
        with tempfile.TemporaryDirectory() as ws:
            kernel = self.answer(ws, "step1_row_softmax")
            r = run("check", "step1_row_softmax", "--dir", ws, "--build", build, "--no-build")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("step1_naive/attention.cu itself", r.stdout)
            kernel.write_text(kernel.read_text() + "// my own notes\n")
            r = run("check", "step1_row_softmax", "--dir", ws, "--build", build, "--no-build")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertNotIn("itself", r.stdout)
            self.assertIn("PASS: step1_row_softmax", r.stdout)
            self.assertTrue(Path(ws, ".build", "step1_naive").exists())
            # A case past its time (a loop that never ends; here no time at all) fails in one
            # message with the case, not a traceback.
            r = run("check", "step1_row_softmax", "--dir", ws, "--build", build, "--no-build",
                    "--first-case", "--timeout", "0.001")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("did not finish in 0.001 s", r.stdout)
            self.assertNotIn("Traceback", r.stdout + r.stderr)

    def test_an_unswizzled_answer_fails_on_its_bank_conflicts(self):
        # step4_swizzle is checked on counts: a layout without the swizzle computes the right
        # result (writer and reader agree) and must still fail, naming the conflicts.
        build = self.build("counted/step4_tensorcore",
                           "needs a build with counted copies (ATTN_BUILD_DIR, g++)")
        with tempfile.TemporaryDirectory() as ws:
            self.answer(ws, "step4_swizzle", lambda text: text.replace(
                "(((d % 64) / 8) ^ (r % 8)) * 8 + d % 8", "d % 64"))
            r = run("check", "step4_swizzle", "--dir", ws, "--build", build, "--no-build")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("the result is right, but the layout has bank conflicts", r.stdout)
            self.assertIn("in ldmatrix (D=64)", r.stdout)

    def test_an_answer_that_masks_every_tile_fails_on_its_count(self):
        # step4_unmasked_tiles and step6_tile_pairs are about work left out: an answer that masks
        # every tile computes the right result and must still fail on the masked path's count
        # (gcov, g++ only); a right answer of one's own passes it, and one without the counted
        # line fails.
        build = self.build("step4_tensorcore")
        missing = exercise.gcov_missing(exercise.ninja_commands(Path(build), "step4_tensorcore")[0])
        if missing:
            self.skipTest(missing)
        strict = "the result is right, but the kernel took the masked path more often"
        line = exercise.load("step4_unmasked_tiles")["count"]["line"]
        cases = {"step4_unmasked_tiles": [
                     ("min(attn::row_keys_end(p, b, i0) / Bc, n_tiles);", "0;", 1, strict),
                     ("\n}\n", "\n}\n// my own notes\n", 0,  # right, and not the step's file
                      "PASS: step4_unmasked_tiles (the first case, its masked path counted)"),
                     (line, line + " ", 1, "is not in")],
                 "step6_tile_pairs": [
                     ("? attn::row_keys_end(p, b, w0) : 0;", "? 0 : 0;", 1, strict)]}
        for name, edits in cases.items():
            with tempfile.TemporaryDirectory() as ws:  # the step's count made once in it
                kernel = self.answer(ws, name)
                right = kernel.read_text()
                for old, new, code, said in edits:
                    self.assertIn(old, right)
                    kernel.write_text(right.replace(old, new, 1))
                    r = run("check", name, "--dir", ws, "--build", build, "--no-build",
                            "--first-case")
                    self.assertEqual(r.returncode, code, r.stdout + r.stderr)
                    self.assertIn(said, r.stdout)

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
