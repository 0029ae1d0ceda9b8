"""Ctrl-C ends a long CPU-backend run at once.

The CPU backend installs no SIGINT handler and its worker threads block no signals, so SIGINT's
default action ends the process wherever the fibers are. This test starts a run that takes tens of
seconds, sends SIGINT after one second, and requires the process to be gone within 2 s, ended by
the signal.
"""
import os
import signal
import subprocess
import sys
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("ATTN_BIN_DIR", os.path.join(ROOT, "build", "bin"))


class Interrupt(unittest.TestCase):
    def interrupt(self, step, *args):
        cmd = [os.path.join(BIN, step), "--backend", "cpu", "--iters", "100", "--warmup", "0",
               "--no-check", *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        self.assertIsNone(proc.poll(), f"{step} ended before the signal: the run is too short")
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            self.fail(f"{step} still running 2 s after SIGINT")
        print(f"{step}: exited {time.monotonic() - sent:.3f} s after SIGINT (status {rc})")
        self.assertEqual(rc, -signal.SIGINT)

    def test_step4_cpu_run_ends_on_sigint(self):
        self.interrupt("step4_tensorcore", "--heads", "16", "--seq", "2048", "--dim", "64")

    def test_step3_cpu_run_ends_on_sigint(self):
        self.interrupt("step3_fused", "--heads", "16", "--seq", "2048", "--dim", "64")


if __name__ == "__main__":
    sys.exit(unittest.main())
