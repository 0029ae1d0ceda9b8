"""scripts/profile.py without a GPU: every step prints its commands, bad input is refused."""
import subprocess
import sys
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "profile.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


class Profile(unittest.TestCase):
    def test_every_step_prints_its_commands(self):
        for step in range(1, 6):
            lesson = run(f"step{step}", "lesson", "--print")
            self.assertEqual(lesson.returncode, 0, lesson.stderr)
            self.assertIn("--section", lesson.stdout)
            self.assertIn("--backend gpu", lesson.stdout)
            sanitize = run(str(step), "sanitize", "--print")
            tools = [line.split()[2] for line in sanitize.stdout.splitlines()]
            self.assertEqual(set(tools), {"memcheck", "racecheck", "synccheck", "initcheck"})
            timeline = run(f"step{step}", "timeline", "--print")
            self.assertTrue(timeline.stdout.startswith("nsys profile"), timeline.stdout)
        # step 5 has two kernels: each is profiled, forced by --variant
        lines = run("step5", "lesson", "--print").stdout.splitlines()
        self.assertEqual([l.split("--variant ")[1].split()[0] for l in lines], ["sm80", "sm90a"])

    def test_the_lesson_metrics_are_the_steps(self):
        self.assertIn("dram__bytes_read.sum", run("step1", "lesson", "--print").stdout)
        self.assertIn("bank_conflicts", run("step2", "lesson", "--print").stdout)
        self.assertIn("tensor_op", run("step4", "lesson", "--print").stdout)

    def test_counters_mode_names_what_the_cpu_counts(self):
        # The ncu twin of --counters: the metrics of docs/profiling.md, at --counters' shape.
        out = run("step4", "counters", "--print").stdout
        for metric in ("sm__sass_l1tex_t_sectors_pipe_lsu_mem_global_op_ldgsts.sum",
                       "sm__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum",
                       "sm__inst_executed_pipe_tensor_op_hmma.sum", "dram__bytes_read.sum",
                       "sm__inst_executed_pipe_tensor_op_hmma_type_hfma2.sum"):
            self.assertIn(metric, out)
        # Every metric it asks for is one the GPU machine's ncu lists (`ncu --query-metrics`, its
        # output kept in docs/results/h200/log.txt), by its base name
        log = (SCRIPT.parent.parent / "docs" / "results" / "h200" / "log.txt").read_text()
        listed = {line.split()[0] for line in log.split("== ncu --query-metrics")[1].splitlines()
                  if line and not line[0].isspace()}
        asked = out.split("--metrics ")[1].split()[0].split(",")
        checkable = [m for m in asked if any(w in m for w in ("ldgsts", "ldsm", "tensor_op"))]
        self.assertGreaterEqual(len(checkable), 7, checkable)  # what the log's query kept
        self.assertEqual([m for m in checkable if m.rsplit(".", 1)[0] not in listed], [])
        self.assertIn("--batch 1 --heads 4 --seq 256 --dim 64", out)
        docs = (SCRIPT.parent.parent / "docs" / "profiling.md").read_text()
        for metric in out.split("--metrics ")[1].split()[0].split(","):
            self.assertIn(metric.replace(".sum", ""), docs)

    def test_arguments_after_dashes_replace_the_shape(self):
        out = run("step4", "lesson", "--print", "--", "--seq", "77").stdout
        self.assertIn("--seq 77", out)
        self.assertNotIn("--seq 4096", out)

    def test_bad_input_is_one_line_and_exit_2(self):
        for args in (["step0", "lesson"], ["step9", "lesson"], ["step4", "bogus"], [],
                     ["step4", "lesson", "--print", "--"]):
            result = run(*args)
            self.assertEqual(result.returncode, 2, args)
            self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)


if __name__ == "__main__":
    unittest.main()
