"""What a newcomer hit in the first hour, each fixed and kept fixed: skipped tests show their
reason, long step0 runs show progress, the exercise tool names the wrong generator, ptxas's report
of the cuBLAS baseline stays off the build output, and an exercise does not give its answer away."""
import os
import pty
import select
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("ATTN_BIN_DIR", ROOT / "build" / "bin"))
BUILD = Path(os.environ.get("ATTN_BUILD_DIR", ROOT / "build"))
sys.path.insert(0, str(ROOT / "scripts"))
import exercise  # noqa: E402
import skips  # noqa: E402

LOG = """Start testing: Nov 25 09:35 UTC
----------------------------------------------------------
5/9 Testing: gpu.step1_naive.matrix
5/9 Test: gpu.step1_naive.matrix
Command: "tests/step_tests" "[gpu][step1_naive]"
Output:
----------------------------------------------------------
skipped: built without the CUDA toolkit
<end of output>
Test time =   0.00 sec
----------------------------------------------------------
Test Passed.
----------------------------------------------------------

7/9 Testing: sdpa.step1_naive
7/9 Test: sdpa.step1_naive
Command: "python" "scripts/check_sdpa.py" "--steps" "step1_naive"
Output:
----------------------------------------------------------
check_sdpa: skipped: No module named 'torch' (install with ATTN_WITH_TORCH=1)
<end of output>
Test time =   0.02 sec
----------------------------------------------------------
Test Passed.
----------------------------------------------------------

6/9 Testing: common.ok
6/9 Test: common.ok
Command: "tests/common_tests" "ok"
Output:
----------------------------------------------------------
All tests passed
<end of output>
Test time =   0.01 sec
----------------------------------------------------------
Test Passed.
----------------------------------------------------------

End testing: Nov 25 09:35 UTC
"""


class FirstHour(unittest.TestCase):
    def test_skipped_tests_show_their_reason(self):
        # CTest's summary says only "***Skipped"; the test command then lists each with why.
        self.assertEqual(skips.skips(LOG),
                         [("gpu.step1_naive.matrix", "built without the CUDA toolkit"),
                          ("sdpa.step1_naive",
                           "No module named 'torch' (install with ATTN_WITH_TORCH=1)")])
        with tempfile.NamedTemporaryFile("w", suffix=".log") as f:
            f.write(LOG)
            f.flush()
            r = subprocess.run([sys.executable, str(ROOT / "scripts" / "skips.py"), f.name],
                               capture_output=True, text=True)
        self.assertEqual(r.stdout, "skipped: gpu.step1_naive.matrix: built without the CUDA "
                         "toolkit\nskipped: sdpa.step1_naive: No module named 'torch' (install "
                         "with ATTN_WITH_TORCH=1)\n")
        self.assertIn("scripts/skips.py", (ROOT / "scripts" / "test.sh").read_text())

    def test_a_long_step0_run_shows_progress_on_a_terminal(self):
        # Steps 1-5 show "block i of n ... about s left"; step 0 ran minutes in silence.
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(str(BIN / "step0_reference"),
                     [str(BIN / "step0_reference"), "--seq", "100000", "--heads", "1", "--dim",
                      "8", "--no-check"])
        out, deadline = b"", time.monotonic() + 15
        try:
            while time.monotonic() < deadline and b"left" not in out:
                if select.select([fd], [], [], 0.5)[0]:
                    out += os.read(fd, 4096)
        finally:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        text = out.decode(errors="replace")
        self.assertIn("step0_reference: row ", text)
        self.assertIn("of 100000", text)
        self.assertIn("s left", text)

    def test_the_exercise_tool_names_a_build_of_another_generator(self):
        # It used to reconfigure the directory with Ninja, fail, and say "run scripts/setup.sh".
        with tempfile.TemporaryDirectory() as tmp:
            build = Path(tmp) / "make-build"
            build.mkdir()
            (build / "CMakeCache.txt").write_text("CMAKE_GENERATOR:INTERNAL=Unix Makefiles\n")
            ws = Path(tmp) / "ws"
            run = [sys.executable, str(ROOT / "scripts" / "exercise.py")]
            subprocess.run(run + ["start", "step3_epilogue", "--dir", str(ws)], check=True,
                           capture_output=True)
            r = subprocess.run(run + ["check", "step3_epilogue", "--dir", str(ws), "--build",
                                      str(build)], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn("configured with the 'Unix Makefiles' generator", r.stderr)
            self.assertNotIn("setup.sh", r.stderr)

    def test_ptxas_reports_stay_off_the_build_output(self):
        # Every nvcc command with --resource-usage goes through cmake/nvcc_capture.sh, which
        # keeps ptxas's report beside the object (the cuBLAS baseline printed 27 lines).
        ninja = BUILD / "build.ninja"
        if not ninja.exists() or "nvcc" not in ninja.read_text():
            self.skipTest("no nvcc in this build (CPU-only): nothing compiled for the GPU")
        r = subprocess.run(["ninja", "-C", str(BUILD), "-t", "commands"], capture_output=True,
                           text=True)
        loud = [line for line in r.stdout.splitlines()
                if "--resource-usage" in line and "nvcc_capture.sh" not in line]
        self.assertEqual(loud, [])

    def test_measuring_scripts_refuse_a_bad_readme_before_any_work(self):
        # edit_loop.py marks kernels changed and rebuilds; first_result.py and test_times.py
        # clone and run main.sh or test.sh: a file they cannot rewrite must stop them before
        # that, in one line.
        with tempfile.TemporaryDirectory() as tmp:
            unmarked = Path(tmp) / "unmarked.txt"
            unmarked.write_text("no markers here\n")
            missing = Path(tmp) / "missing.txt"
            for script, readme, *more in (
                    ("edit_loop.py", unmarked), ("first_result.py", unmarked),
                    ("cpu_speed.py", missing), ("cpu_speed.py", unmarked, "--counters"),
                    ("cpu_speed.py", unmarked, "--against", tmp), ("test_times.py", unmarked)):
                r = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--readme",
                                    str(readme), *more], capture_output=True, text=True,
                                   timeout=20)
                self.assertEqual(r.returncode, 2, script)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertIn(str(readme), r.stderr)
                self.assertEqual(r.stdout, "", script)

    def test_cpu_speed_takes_one_report_at_a_time(self):
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / "cpu_speed.py"), "--counters",
                            "--against", str(BUILD)], capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.strip().splitlines(), [
            "cpu_speed: --counters and --against are two reports: pick one"])

    def test_no_exercise_shows_its_answer_outside_its_blanks(self):
        # step4_p_fragments gave its answer away in the dropout lines below the blank.
        for name in exercise.names():
            spec = exercise.load(name)
            text = exercise.blanked(spec)
            for blank in spec["blank"]:
                for line in blank["lines"]:
                    code = line.strip()
                    # a statement, not a brace or a loop header the kernel repeats elsewhere
                    if len(code) > 20 and not code.startswith("for ("):
                        self.assertNotIn(code, text, name)
        # and the P-fragment indices in particular
        p = exercise.blanked(exercise.load("step4_p_fragments"))
        self.assertNotIn("p_frag[nt / 2][2 * (nt % 2)]", p)


if __name__ == "__main__":
    unittest.main()
