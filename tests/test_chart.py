"""The results pipeline: CSV schema, FLOP count, chart rendering and refusal, README table."""
import csv
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("ATTN_BIN_DIR", os.path.join(ROOT, "build", "bin"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bench  # noqa: E402
import chart  # noqa: E402


def run_step0(tmp, *args):
    path = os.path.join(tmp, "r.csv")
    if os.path.exists(path):
        os.remove(path)
    subprocess.run([os.path.join(BIN, "step0_reference"), "--iters", "1", "--warmup", "0",
                    "--csv", path, "--quiet", *args], check=True, capture_output=True)
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def handmade_gpu_csv(path, columns, drop=None, gpu="NVIDIA H100", backward=False):
    """Invented rows, for testing the chart only: the device name says so. `backward`: with rows
    of the backward pass too (step 6, SDPA's backward)."""
    rows = []
    extra = [("step6_backward", 3.0), ("torch_sdpa_flash_backward", 2.0)] if backward else []
    for s, (sq, causal) in enumerate([(1024, 0), (4096, 1)]):
        for step, t in [("step1_naive", 40.0), ("step2_tiled", 20.0), ("step3_fused", 4.0),
                        ("step4_tensorcore", 1.0), ("step5_warpspecialized[sm80]", 0.9),
                        ("baseline_cublas", 2.0),
                        ("torch_sdpa_flash", 0.8)] + extra:
            r = {c: "" for c in columns}
            fl = 4 * 64 * 16 * sq * sq / (2 if causal else 1)
            r.update(step=step, backend="gpu", device=f"TEST-ONLY invented rows ({gpu})",
                     dtype="fp16", batch=1, heads=16, heads_kv=16, seqlen_q=sq, seqlen_k=sq,
                     dim=64, causal=causal, time_ms=t * (s + 1), flops=fl,
                     tflops=fl / (t * (s + 1) * 1e-3) / 1e12, checked=0, passed="",
                     commit="test", toolkit="test")
            rows.append(r)
    cols = [c for c in columns if c != drop]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


class Pipeline(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.columns = list(run_step0(self.dir, "--seq", "4", "--no-check")[0].keys())

    def tearDown(self):
        self.tmp.cleanup()

    def render(self, src, name):
        """scripts/chart.py on `src`, into this test's folder; returns OUT (OUT.png, OUT.svg)."""
        out = os.path.join(self.dir, name)
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "chart.py"), src,
                            "--out", out], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return out

    def test_schema_has_what_the_chart_needs(self):
        # The C++ writer (common/report.cpp) and the chart agree on the column names.
        self.assertEqual([c for c in chart.REQUIRED if c not in self.columns], [])

    def test_flop_count_matches_the_binary(self):
        # bench.py's count (used for the PyTorch rows) equals the C++ one, causal with Sq != Sk.
        for args, shape in [
                (["--seqlen-q", "7", "--seqlen-k", "19", "--causal", "--dim", "8"],
                 dict(batch=1, heads=4, seqlen_q=7, seqlen_k=19, dim=8, causal=True)),
                (["--seqlen-q", "19", "--seqlen-k", "7", "--causal", "--dim", "8", "--batch", "2"],
                 dict(batch=2, heads=4, seqlen_q=19, seqlen_k=7, dim=8, causal=True)),
                (["--seq", "33", "--dim", "16"],
                 dict(batch=1, heads=4, seqlen_q=33, seqlen_k=33, dim=16, causal=False))]:
            row = run_step0(self.dir, *args)[0]
            self.assertEqual(float(row["flops"]), bench.flops(shape), args)

    def test_flop_count_with_per_batch_key_lengths(self):
        row = run_step0(self.dir, "--batch", "3", "--heads", "2", "--seqlen-q", "5",
                        "--seqlen-k", "9", "--seqlens-k", "9,0,4", "--causal", "--dim", "4")[0]
        # batch 0: rows see 5..9 keys (35); batch 1: none; batch 2 (4 keys, Sq=5): 0,1,2,3,4 (10)
        self.assertEqual(float(row["flops"]), 4 * 4 * 2 * (35 + 0 + 10))
        self.assertEqual(row["seqlens_k"], "9;0;4")

    def test_chart_renders_gpu_rows_and_baselines(self):
        src = os.path.join(self.dir, "gpu.csv")
        handmade_gpu_csv(src, self.columns)
        out = self.render(src, "chart")
        for ext in (".png", ".svg"):
            self.assertGreater(os.path.getsize(out + ext), 10000)
        with open(out + ".svg") as f:
            svg = f.read()
        for text in ("baseline_cublas", "torch_sdpa_flash", "MODEL, not a measurement"):
            self.assertIn(text, svg)
        self.assertNotIn("not GPU performance", svg)

    def test_backward_rows_are_kept_apart(self):
        # Step 6's and SDPA's backward rows: a chart of their own, out of the forward's, and
        # labelled in both tables, with no speed-up over the forward's step1.
        src = os.path.join(self.dir, "gpu.csv")
        handmade_gpu_csv(src, self.columns, backward=True)
        out = self.render(src, "chart")
        with open(out + ".svg") as f:
            forward = f.read()
        with open(out + "-backward.svg") as f:
            backward = f.read()
        self.assertFalse("step6_backward" in forward, "step 6 on the forward's chart")
        self.assertFalse("_backward" in forward, "SDPA's backward on the forward's chart")
        for text in ("step6_backward", "torch_sdpa_flash_backward", "The backward pass"):
            self.assertIn(text, backward)
        self.assertFalse("step4_tensorcore" in backward, "the forward on the backward's chart")
        table = chart.readme_table(chart.load([src]), [src])
        row = next(line for line in table.splitlines() if "| step6_backward" in line)
        self.assertIn("| step6_backward (backward) |", row)
        self.assertEqual(row.split(" | ")[4], "-")  # vs step1
        text = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "table.py"), src],
                              capture_output=True, text=True).stdout
        self.assertIn("Sq=1024 Sk=1024 D=64, backward\n  step", text)

    def test_two_gpus_get_two_charts(self):
        a, b = os.path.join(self.dir, "a.csv"), os.path.join(self.dir, "b.csv")
        handmade_gpu_csv(a, self.columns, gpu="NVIDIA H100")
        handmade_gpu_csv(b, self.columns, gpu="NVIDIA A100")
        out = os.path.join(self.dir, "room")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "chart.py"), a, b,
                            "--out", out], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        charts = sorted(f for f in os.listdir(self.dir) if f.startswith("room-"))
        self.assertEqual(charts, ["room-test-only-invented-rows-a100.png",
                                  "room-test-only-invented-rows-a100.svg",
                                  "room-test-only-invented-rows-h100.png",
                                  "room-test-only-invented-rows-h100.svg"])
        with open(os.path.join(self.dir, "room-test-only-invented-rows-a100.svg")) as f:
            svg = f.read()
        self.assertIn("A100", svg)
        self.assertNotIn("H100)", svg)

    def test_a_committed_chart_is_its_png_alone(self):
        # --no-svg, the way a chart goes under docs/results/ (docs/benchmarking.md): no SVG
        src = os.path.join(self.dir, "gpu.csv")
        handmade_gpu_csv(src, self.columns, backward=True)
        out = os.path.join(self.dir, "committed")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "chart.py"), src,
                            "--out", out, "--no-svg"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(f for f in os.listdir(self.dir) if f.startswith("committed")),
                         ["committed-backward.png", "committed.png"])
        self.assertNotIn(".svg", r.stdout)

    def test_cpu_rows_are_labelled(self):
        src = os.path.join(self.dir, "r.csv")
        run_step0(self.dir, "--seq", "16")
        out = os.path.join(self.dir, "cpu")
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "chart.py"), src, "--out",
                        out], check=True, capture_output=True)
        with open(out + ".svg") as f:
            self.assertIn("CPU backend: not GPU performance", f.read())

    def test_counted_cpu_rows_chart_the_counts(self):
        # bench.py on the CPU backend runs --counters: the chart then draws what the steps did
        # (counts, and the model labelled as one), and the README table lists the counts.
        if not os.path.exists(os.path.join(BIN, "counted", "step3_fused")):
            self.skipTest("no counted copies in this build (g++ builds them)")
        src = os.path.join(self.dir, "counted.csv")
        for step in ("step1_naive", "step3_fused", "step4_tensorcore"):
            subprocess.run([os.path.join(BIN, step), "--backend", "cpu", "--seq", "64",
                            "--heads", "2", "--counters", "--csv", src, "--quiet"], check=True,
                           capture_output=True)
        with open(src, newline="") as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([r["counted"] for r in rows], ["1", "1", "1"])
        # step1 writes and reads S/P: 2 x 64 x 64 floats more than the fused steps touch.
        self.assertEqual(int(rows[0]["dram_bytes_min"]) - int(rows[1]["dram_bytes_min"]),
                         2 * 64 * 64 * 4)
        self.assertEqual(float(rows[1]["tensor_share"]), 0)
        self.assertEqual(float(rows[2]["tensor_share"]), 1)
        out = self.render(src, "counted")
        with open(out + ".svg") as f:
            svg = f.read()
        for text in ("Counted: DRAM bytes at least moved", "Counted: sector efficiency",
                     "Counted: shared-memory bank conflicts",
                     "MODEL, not a measurement: speed-of-light time on H100 SXM"):
            self.assertIn(text, svg)
        self.assertNotIn("TFLOPS (4 * D", svg)
        readme = os.path.join(self.dir, "README.md")
        with open(readme, "w") as f:
            f.write("<!-- results:begin -->\n<!-- results:end -->\n")
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "chart.py"), src,
                        "--no-plot", "--readme", readme], check=True, capture_output=True)
        with open(readme) as f:
            text = f.read()
        self.assertIn("| shape | step | DRAM bytes, at least | sector efficiency | shared "
                      "conflicts | tensor FLOPs / problem FLOPs | H100 SXM MODEL (us, binding unit) |", text)
        self.assertIn("| step4_tensorcore | 0.063 MiB |", text)  # Q, K, V, O 16 KiB each, LSE

    def test_chart_refuses_a_missing_column(self):
        src = os.path.join(self.dir, "bad.csv")
        handmade_gpu_csv(src, self.columns, drop="tflops")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "chart.py"), src,
                            "--out", os.path.join(self.dir, "x")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("missing column(s): tflops", r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "x.png")))

    def test_chart_refuses_a_non_number(self):
        src = os.path.join(self.dir, "bad.csv")
        handmade_gpu_csv(src, self.columns)
        with open(src) as f:
            text = f.read().replace("step3_fused,gpu", "step3_fused,gpu", 1)
        lines = text.splitlines()
        lines[3] = lines[3].replace(",16,16,", ",sixteen,16,", 1)
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "chart.py"), src,
                            "--no-plot"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn(":4: column heads is not a number", r.stderr)

    def test_readme_table_is_regenerated_between_markers(self):
        src = os.path.join(self.dir, "gpu.csv")
        handmade_gpu_csv(src, self.columns)
        readme = os.path.join(self.dir, "README.md")
        with open(readme, "w") as f:
            f.write("# Title\n\nbefore\n<!-- results:begin -->\nold table\n"
                    "<!-- results:end -->\nafter\n")
        for _ in range(2):  # idempotent
            subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "chart.py"), src,
                            "--no-plot", "--readme", readme], check=True, capture_output=True)
        with open(readme) as f:
            text = f.read()
        self.assertTrue(text.startswith("# Title\n\nbefore\n<!-- results:begin -->\n"))
        self.assertTrue(text.endswith("<!-- results:end -->\nafter\n"))
        self.assertNotIn("old table", text)
        self.assertIn("| fp16 B=1 H=16 S=4096 D=64 causal | step3_fused | 8.000 |", text)
        self.assertIn("| 10.0x |", text)  # step1 40 ms -> step3 4 ms at S=1024
        self.assertEqual(text.count("results:begin"), 1)

    def test_readme_without_markers_is_refused(self):
        src = os.path.join(self.dir, "gpu.csv")
        handmade_gpu_csv(src, self.columns)
        readme = os.path.join(self.dir, "README.md")
        with open(readme, "w") as f:
            f.write("# no markers\n")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "chart.py"), src,
                            "--no-plot", "--readme", readme], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("markers", r.stderr)


if __name__ == "__main__":
    unittest.main()
