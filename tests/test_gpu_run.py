"""The GPU run without a GPU (scripts/gpu_bundle.sh, scripts/gpu_run.sh, scripts/gpu_report.py):
its bad input, its rehearsal, its GPU path against stand-ins for the GPU's tools, the parsing of
Nsight Compute's output, and attn_suite's timing mode on the CPU backend.

ATTN_BUILD_DIR names the build; the bundle packed from it by the CTest fixture gpu_run.bundle is
ATTN_BUILD_DIR/gpu-bundle-rehearsal.
"""
import csv
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("ATTN_BUILD_DIR", ROOT / "build"))
BUNDLE = BUILD / "gpu-bundle-rehearsal"
BUNDLE_SH, RUN_SH = ROOT / "scripts" / "gpu_bundle.sh", ROOT / "scripts" / "gpu_run.sh"
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_report  # noqa: E402

FILES = {"log.txt", "README.md", "run.json", "check.csv", "sanitize.txt", "timings.csv",
         "counters.csv", "chart.png"}


def run(*cmd, env=None, timeout=600):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env,
                          timeout=timeout)


def stand_in(folder, name, body):
    path = Path(folder) / name
    path.write_text("#!/usr/bin/env bash\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


class GpuRun(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="gpu_run_test_"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def assert_refused(self, result, words):
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        self.assertEqual(result.stdout, "")
        self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
        self.assertIn(words, result.stderr)

    def test_bad_input_is_one_line_and_exit_2(self):
        full = self.tmp / "full"
        full.mkdir()
        (full / "mine.txt").write_text("not a bundle")
        # gpu_bundle.sh: an architecture this toolkit lacks (or no toolkit), a folder of something
        # else, a folder that cannot be written, no OUTDIR.
        r = run(BUNDLE_SH, "--arch", "42", self.tmp / "b")
        self.assert_refused(r, "--arch 42")
        self.assert_refused(run(BUNDLE_SH, "--arch", "sm90", self.tmp / "b"), "by number")
        # A toolkit hidden the way CI hides it: a non-executable nvcc first on PATH.
        hidden = self.tmp / "hidden"
        hidden.mkdir()
        (hidden / "nvcc").write_text("")
        env = dict(os.environ, PATH=f"{hidden}:/usr/bin:/bin")
        self.assert_refused(run(BUNDLE_SH, "--arch", "90a", self.tmp / "b", env=env),
                            "no CUDA toolkit")
        self.assert_refused(run(BUNDLE_SH, "--from-build", BUILD, full), "not a bundle")
        self.assert_refused(run(BUNDLE_SH, "--from-build", BUILD, "/proc/b"), "cannot be written")
        self.assert_refused(run(BUNDLE_SH, "--arch", "90a"), "usage")
        self.assert_refused(run(BUNDLE_SH, "--from-build", self.tmp, self.tmp / "b"), "no bin/attn_suite")
        # gpu_run.sh: a folder that is not a bundle, an OUTDIR that cannot be written or holds
        # something else, no GPU without --rehearse, a budget too small to split.
        self.assert_refused(run(RUN_SH, full, self.tmp / "o", "--rehearse"), "not a bundle")
        self.assert_refused(run(RUN_SH, BUNDLE, "/proc/o", "--rehearse"), "cannot be written")
        self.assert_refused(run(RUN_SH, BUNDLE, full, "--rehearse"), "not empty")
        self.assert_refused(run(RUN_SH, BUNDLE, self.tmp / "o", "--budget", "10", "--rehearse"),
                            "--budget 10")
        env = dict(os.environ, PATH=f"{self.tmp}:/usr/bin:/bin")  # no nvidia-smi
        self.assert_refused(run(RUN_SH, BUNDLE, self.tmp / "o", env=env), "no NVIDIA GPU here")
        # gpu_report.py readme: markers missing, a folder that holds no run
        readme = self.tmp / "README.md"
        readme.write_text("no markers\n")
        self.assert_refused(run(sys.executable, ROOT / "scripts" / "gpu_report.py", "readme",
                                readme), "no <!-- gpu-results:begin -->")

    def test_the_rehearsal_runs_every_stage(self):
        out = self.tmp / "out"
        r = run(RUN_SH, BUNDLE, out, "--rehearse", "--python", sys.executable)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        log = (out / "log.txt").read_text()
        self.assertEqual(log, r.stdout)  # the log is the whole output, complete when it returns
        self.assertIn("stage limits: a. correctness 72 s, b. sanitizers 120 s, c. timings 168 s, "
                      "d. Nsight Compute 72 s, e. Python 48 s: 480 s", log)
        for stage in ("b. compute-sanitizer", "c. timings", "d. Nsight Compute"):
            self.assertIn(f"== {stage}: skipped: no GPU", log)
        self.assertLessEqual(set(os.listdir(out)), FILES)
        # every kernel checked on the CPU backend, and passed
        kernels = run(BUNDLE / "bin" / "attn_suite", "list", "--kernels", "steps,rungs,configs")
        labels = {line.split("\t")[0] for line in kernels.stdout.splitlines()}
        with open(out / "check.csv") as f:
            rows = list(csv.DictReader(f))
        self.assertEqual({r["kernel"] for r in rows}, labels)
        self.assertTrue(all(r["status"] == "pass" and r["backend"] == "cpu" for r in rows))
        report = json.loads((out / "run.json").read_text())
        self.assertTrue(report["rehearsal"])
        # The bundle's MANIFEST records which source each kernel's figures measure (a hash of its
        # .cu file and the headers it includes), which run.json carries: this tree's, as packed
        sources = report["provenance"]["sources"]
        self.assertEqual(set(sources["kernels"]), labels)
        self.assertEqual(sources["kernels"], gpu_report.kernel_sources.hashes(sorted(labels)))
        self.assertNotIn("  ", "".join(report["provenance"]["bundle"]))  # no indented line
        # Stage e: the package's CUDA-array tests (their refusals; the rest skip without a GPU)
        # with the build's own package and Python, where the build has the package.
        package = (BUNDLE / "python" / "flashsteps").is_dir()
        self.assertEqual([s["status"] for s in report["stages"]],
                         ["passed"] + ["skipped: no GPU"] * 3
                         + ["passed" if package else "skipped: no Python package in the bundle "
                            "(gpu_bundle.sh --arch builds one)"])
        # The bundle says which Python its package is built for; without --python the run looks
        # for that version first.
        manifest = (BUNDLE / "MANIFEST").read_text()
        if package:
            self.assertIn("python: %d.%d\n" % sys.version_info[:2], manifest)
        if package:
            section = (out / "README.md").read_text().split("## e. ")[1]
            self.assertRegex(section, r"\d+ passed, \d+ skipped")
            self.assertIn("benchmark: skipped: no GPU", section)
        summary = (out / "README.md").read_text()
        self.assertIn("| step4_tensorcore[swizzle] | 2 | 0 | 0 | - |", summary)
        # the counters table: the CPU column from the bundle, ncu's empty, said why
        with open(out / "counters.csv") as f:
            counters = list(csv.DictReader(f))
        if (BUNDLE / "share" / "cpu_counts.csv").exists():
            mma = [c for c in counters if c["kernel"] == "step4_tensorcore" and c["counter"] == "mma"]
            self.assertGreater(int(mma[0]["cpu"]), 0)
        self.assertTrue(all(c["ncu"] == "" for c in counters))
        # the README's block refuses a rehearsal's results, unless asked to show one
        readme = self.tmp / "README.md"
        readme.write_text("# x\n<!-- gpu-results:begin -->\nold\n<!-- gpu-results:end -->\n")
        tool = [sys.executable, ROOT / "scripts" / "gpu_report.py", "readme", readme]
        self.assert_refused(run(*tool, out), "a rehearsal's results")
        self.assertEqual(run(*tool, out, "--allow-rehearsal").returncode, 0)
        self.assertIn("REHEARSAL, no GPU", readme.read_text())
        self.assertEqual(run(*tool).returncode, 0)
        self.assertIn("No GPU has run these kernels yet", readme.read_text())

    def test_the_gpu_path_runs_against_stand_in_tools(self):
        # nvidia-smi finds a GPU; compute-sanitizer hangs, deaf to TERM (the stage overruns, is
        # killed and recorded, and the next one runs); ncu prints its CSV for each kernel without
        # running it. attn_suite itself finds no CUDA device, so its GPU stages fail: what is tested
        # is the script's plumbing. The Python it is given hides PyTorch: importing it takes seconds
        # on a loaded machine (stages c and e import it three times), more than this short budget
        # leaves them; the rehearsal above runs stage e with PyTorch where it is installed.
        tools = self.tmp / "tools"
        tools.mkdir()
        hidden = self.tmp / "hidden"
        hidden.mkdir()
        for module in ("torch", "pytest"):  # stage e leaves out what needs them, a line each
            (hidden / f"{module}.py").write_text(
                f"raise ModuleNotFoundError(\"No module named '{module}' (hidden by the test)\", "
                f"name='{module}')\n")
        python = tools / "python-without-torch"
        python.write_text(f'#!/bin/sh\nPYTHONPATH="{hidden}${{PYTHONPATH:+:$PYTHONPATH}}" '
                          f'exec "{sys.executable}" "$@"\n')
        python.chmod(0o755)
        stand_in(tools, "nvidia-smi", """\
            case "$*" in
              -L) echo "GPU 0: Stand-in GPU (UUID: GPU-0)" ;;
              *-lms*) for i in 1 2 3; do echo "2026/11/27 00:00:0$i.000, 1980 MHz, 2619 MHz, 650 W, 6$i"; done ;;
              *clocks_event_reasons*) echo "0x0000000000000000" ;;
              *) echo "name, driver_version, clocks.current.sm [MHz], ..."
                 echo "Stand-in GPU, 999.1, 1755 MHz, 1980 MHz, 2619 MHz, 2619 MHz, 70 W, 700 W, 30, P0" ;;
            esac""")
        stand_in(tools, "compute-sanitizer", "trap '' TERM\nsleep 600\n")  # deaf to TERM
        # ncu lacks one warp-stall metric: it says so, and the stage runs the kernel again without
        stand_in(tools, "ncu", """\
            while [[ $1 == -* ]]; do
              case $1 in
                --csv) shift ;;
                --log-file) log=$2; shift 2 ;;
                --metrics) metrics=$2; shift 2 ;;
                *) shift 2 ;;
              esac
            done
            if [[ ,$metrics, == *,smsp__warps_issue_stalled_misc.sum,* ]]; then
              echo "==ERROR== Failed to find metric smsp__warps_issue_stalled_misc.sum" >&2
              exit 1
            fi
            echo '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Section Name","Metric Name","Metric Unit","Metric Value"' >"$log"
            for m in ${metrics//,/ }; do
              for id in 0 1; do
                echo "\\"$id\\",\\"1\\",\\"attn_suite\\",\\"h\\",\\"k\\",\\"1\\",\\"7\\",\\"Command line profiler metrics\\",\\"$m\\",\\"\\",\\"1,000\\"" >>"$log"
              done
            done""")
        env = dict(os.environ, PATH=f"{tools}:{os.environ['PATH']}")
        out = self.tmp / "out"
        r = run(RUN_SH, BUNDLE, out, "--budget", "20", "--python", python, env=env, timeout=300)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        report = json.loads((out / "run.json").read_text())
        self.assertFalse(report["rehearsal"])
        status = {s["name"]: s for s in report["stages"]}
        self.assertEqual(list(status), ["a. correctness", "b. compute-sanitizer", "c. timings",
                                        "d. Nsight Compute", "e. Python"])
        self.assertEqual(status["b. compute-sanitizer"]["status"], "stopped at its limit")
        # Stage e: the build's package where it has one; this Python has neither pytest nor
        # PyTorch, so the stage leaves out its tests and its benchmark, and says why.
        e = status.pop("e. Python")["status"]
        if (BUNDLE / "python" / "flashsteps").is_dir():
            self.assertRegex(e, r"^left out: the package's tests: no pytest for Python 3\.\d+ "
                                r"\(No module named 'pytest'.*\); the benchmark: no PyTorch")
        else:
            self.assertTrue(e.startswith("skipped: no Python package in the bundle"), e)
        # Each stage's limit is its share of the budget (15, 25, 35 and 15%) and what the stages
        # before it left unused.
        spare = 0
        for s, share in zip(status.values(), [3, 5, 7, 3]):
            self.assertEqual(s["limit_s"], share + spare, s)
            spare = max(0, s["limit_s"] - s["took_s"])
        for s in status.values():
            self.assertLessEqual(s["took_s"], s["limit_s"] + 6, s)
        self.assertRegex((out / "log.txt").read_text(),
                         "--backend gpu: (no CUDA device|built without the CUDA toolkit)")
        self.assertIn("Stand-in GPU, 999.1", report["provenance"]["gpu_idle"])
        self.assertTrue(report["title"].startswith(
            "Stand-in GPU; driver 999.1; SM 1980 MHz, memory 2619 MHz (medians while timing); "
            "1755 MHz before"), report["title"])
        self.assertEqual(report["provenance"]["during_timings"]["temperature_c"], [61, 62, 63])
        with open(out / "counters.csv") as f:
            counters = [c for c in csv.DictReader(f) if c["ncu"]]
        self.assertTrue(counters)
        dram = [c for c in counters if c["counter"] == "dram_bytes_min"][0]
        self.assertEqual(dram["ncu"], "4000")  # read + write, each summed over two launches
        text = (out / "README.md").read_text()
        self.assertIn("| ncu / CPU |", text)
        # ncu-only: ptxas's HFMA2.MMA, no CPU figure
        hfma2 = [c for c in counters if c["counter"] == "hfma2_mma"]
        self.assertTrue(hfma2 and all(c["cpu"] == "" for c in hfma2), hfma2)
        # Step 5's sm90a kernel at the short causal shape: its warps' stall reasons and issue rate,
        # after the steps' own kernels and before the rungs; the metric this ncu lacks left out
        with open(out / "counters.csv") as f:
            every = list(csv.DictReader(f))
        stalls = [c for c in every if c["shape"] == gpu_report.STALL_SHAPE]
        self.assertEqual({c["kernel"] for c in stalls}, {"step5_warpspecialized[sm90a]"})
        got = {c["counter"]: c for c in stalls}
        self.assertEqual(got["stall_long_scoreboard"]["ncu"], "2000")
        self.assertEqual(got["issue_active"]["ncu"], "2000")
        self.assertEqual(got["stall_misc"]["ncu"], "")
        self.assertEqual(got["stall_misc"]["note"], "this ncu has no such metric")
        kernels = list(dict.fromkeys((c["kernel"], c["shape"]) for c in every))
        place = kernels.index(("step5_warpspecialized[sm90a]", gpu_report.STALL_SHAPE))
        self.assertTrue(all(k[1] != gpu_report.NCU_SHAPE or "[" not in k[0] or k[0].endswith(
            ("[sm80]", "[sm90a]")) for k in kernels[:place]), kernels[:place])
        self.assertIn("metrics this ncu lacks: smsp__warps_issue_stalled_misc.sum",
                      (out / "log.txt").read_text())
        self.assertIn("**Warp stalls**", text)
        self.assertIn("issuing in 100% of its schedulers' active cycles", text)
        self.assertIn("| long_scoreboard | 2000 | 1.00 |", text)
        self.assertIn("not measured: misc", text)
        self.assertLessEqual(set(os.listdir(out)), FILES)

    def test_tool_output_is_parsed(self):
        # compute-sanitizer's reports as its documentation shows them, around the suite's lines
        path = self.tmp / "sanitize.txt"
        path.write_text(textwrap.dedent("""\
            ### memcheck
            ========= COMPUTE-SANITIZER
            PASS step1_naive: 2 passed, 0 failed, 0 skipped
            ========= Invalid __shared__ write of size 16 bytes
            =========     at void step4::rung3::gpu::attention_kernel<64, __half>(attn::AttentionParams)+0x70 in attention.cu:6
            =========     by thread (0,0,0) in block (0,0,0)
            =========     Saved host backtrace up to driver entry point at kernel launch time
            FAIL step4_tensorcore[registers]: 1 passed, 1 failed, 0 skipped
            ========= ERROR SUMMARY: 1 error
            ### racecheck
            ========= Error: Race reported between Write access at step3::gpu::attention_kernel<128, __nv_bfloat16>(attn::AttentionParams)+0x2b0 in attention.cu:24
            =========     and Read access at step3::gpu::attention_kernel<128, __nv_bfloat16>(attn::AttentionParams)+0x2c0 in attention.cu:26 [4 hazards]
            PASS step3_fused: 2 passed, 0 failed, 0 skipped
            ========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
            ### synccheck
            skipped: no GPU
            """))
        text, result = gpu_report.sanitize_section(str(path))
        self.assertEqual(result["memcheck"]["named"], ["step4::rung3::gpu::attention_kernel"])
        self.assertEqual(result["memcheck"]["reached"], 2)
        self.assertEqual(result["racecheck"]["named"], ["step3::gpu::attention_kernel"])
        self.assertIn("RACECHECK SUMMARY: 1 hazard displayed", result["racecheck"]["summary"])
        self.assertEqual(result["synccheck"], "skipped")
        self.assertIn("| memcheck | ERROR SUMMARY: 1 error | 2 | step4::rung3::gpu::attention_kernel |",
                      text)
        # and Nsight Compute's CSV, in both of its layouts
        long = textwrap.dedent("""\
            ==PROF== Connected to process 7
            "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Section Name","Metric Name","Metric Unit","Metric Value"
            "0","7","a","h","k1(int)","1","7","Command line profiler metrics","dram__bytes_read.sum","byte","1,024"
            "0","7","a","h","k1(int)","1","7","Command line profiler metrics","sm__inst_executed_pipe_tensor_op_hmma.sum","inst","n/a"
            "1","7","a","h","k2(int)","1","7","Command line profiler metrics","dram__bytes_read.sum","byte","2048"
            ==PROF== Disconnected from process 7""")
        self.assertEqual(gpu_report.parse_ncu(long), {"launches": 2, "dram__bytes_read.sum": 3072})
        wide = textwrap.dedent("""\
            "ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum"
            "","","byte","byte"
            "0","k1","10","1"
            "1","k2","20","2\"""")
        self.assertEqual(gpu_report.parse_ncu(wide),
                         {"launches": 2, "dram__bytes_read.sum": 30, "dram__bytes_write.sum": 3})
        self.assertIsNone(gpu_report.parse_ncu("==ERROR== Failed to find metric x.sum"))

    def test_counts_are_set_beside_ncu_as_ncu_counts_them(self):
        # One kernel's rows of counters.csv, as an ncu without the LDGSTS, LDSM and HFMA2.MMA
        # metrics left them (docs/results/h200's): the older rules, each saying so
        rows = [{"kernel": "k", "shape": gpu_report.NCU_SHAPE, "counter": c, "cpu": cpu, "ncu": ncu,
                 "note": "" if ncu else "this ncu has no such metric"}
                for c, cpu, ncu in [("gld_requests", "10", "330"),
                                    ("ldgsts_requests", "320", ""),
                                    ("lds_wavefronts", "100", "4452"),
                                    ("ldsm_wavefronts", "4352", ""),
                                    ("mma", "2048", "2496"), ("wgmma", "112", "448"),
                                    ("dram_bytes_min", "1000", "900")]]
        got = {r[0]: r for r in gpu_report.as_ncu_counts(rows)}
        self.assertEqual(got["gld_requests"][1:4], ["330 (gld_requests 10 + ldgsts_requests 320)",
                                                   "330", "1.00"])
        self.assertIn("the older rule: this run's ncu did not measure ldgsts_requests apart",
                      got["gld_requests"][4])
        self.assertIn("it counts these in gld_requests", got["ldgsts_requests"][4])
        self.assertEqual(got["lds_wavefronts"][3], "1.00")
        self.assertEqual(got["wgmma"][1:4], ["448 (wgmma 112 x 4)", "448", "1.00"])
        self.assertEqual(got["mma"][1], "2496 (mma 2048 + wgmma 112 x 4)")
        self.assertIn("HGMMA", got["mma"][4])
        self.assertIn("not yet DRAM bytes", got["dram_bytes_min"][4])
        # ncu counted 2 HFMA2.MMA more than the CPU's mma: the older rule names them, unmeasured
        rows[4]["ncu"] = "2498"
        mma = {r[0]: r for r in gpu_report.as_ncu_counts(rows)}["mma"]
        self.assertIn("HFMA2.MMA", mma[4])
        self.assertIn("did not measure hfma2_mma apart", mma[4])
        # Where ncu measured LDGSTS, LDSM and HFMA2.MMA apart (profile.py's sm__sass_ metrics and
        # NCU_ONLY): the CPU's own count beside ncu's less the part, each part compared alone
        rows[1]["ncu"], rows[1]["note"] = "320", ""
        rows[3]["ncu"], rows[3]["note"] = "4352", ""
        rows.append({"kernel": "k", "shape": gpu_report.NCU_SHAPE, "counter": "hfma2_mma",
                     "cpu": "", "ncu": "2",
                     "note": "ncu's alone: the CPU backend does not count it"})
        got = {r[0]: r for r in gpu_report.as_ncu_counts(rows)}
        self.assertEqual(got["gld_requests"][1:4],
                         ["10", "10 (gld_requests 330 - ldgsts_requests 320)", "1.00"])
        self.assertIn("measured apart", got["gld_requests"][4])
        self.assertNotIn("older rule", got["gld_requests"][4])
        self.assertEqual(got["ldgsts_requests"][1:4], ["320", "320", "1.00"])
        self.assertEqual(got["lds_wavefronts"][1:4],
                         ["100", "100 (lds_wavefronts 4452 - ldsm_wavefronts 4352)", "1.00"])
        self.assertEqual(got["mma"][1:4], ["2496 (mma 2048 + wgmma 112 x 4)",
                                          "2496 (mma 2498 - hfma2_mma 2)", "1.00"])
        self.assertNotIn("older rule", got["mma"][4])
        self.assertEqual(got["hfma2_mma"][1:4], ["-", "2", "-"])
        self.assertIn("ncu's alone", got["hfma2_mma"][4])
        # and the sentence that sums the table up: every figure both counted, which agree
        sentence = gpu_report.agreement(rows)
        self.assertIn("Of the 7 figures Nsight Compute and the CPU backend both counted", sentence)
        self.assertIn("6 agree exactly: 2 as counted, 4 once a rule", sentence)
        self.assertIn("dram_bytes_min in 1 kernel (k; ncu / CPU 0.90 to 0.90)", sentence)

    def test_the_chapters_show_the_committed_gpu_run(self):
        results = ROOT / "docs" / "results" / "h200"
        tool = [sys.executable, ROOT / "scripts" / "gpu_report.py", "chapters"]
        r = run(*tool, results, "--check")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # A run that measured otherwise is not what the chapters show
        other = self.tmp / "h200"
        shutil.copytree(results, other)
        lines = (other / "timings.csv").read_text().splitlines(keepends=True)
        rows = list(csv.DictReader(lines))
        first = next(i for i, row in enumerate(rows) if row["step"] == "step4_tensorcore[pv]")
        fields = lines[first + 1].split(",")
        fields[16] = str(2 * float(fields[16]))  # time_ms
        lines[first + 1] = ",".join(fields)
        (other / "timings.csv").write_text("".join(lines))
        r = run(*tool, other, "--check")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("step4_tensorcore/README.md", r.stderr)
        self.assert_refused(run(*tool, self.tmp / "nothing"), "not a GPU run's results")
        # The marks are computed: a kernel whose source is today's as the run recorded it loses
        # its mark, one whose recorded hash differs from today's gets one, and the chapters' tables
        # as committed are then out of date.
        run_json = json.loads((results / "run.json").read_text())
        recorded = run_json["provenance"]["sources"]["kernels"]
        today = gpu_report.kernel_sources.hashes(list(recorded))
        changed = gpu_report.changed_kernels(run_json)
        self.assertEqual(changed, {k for k in recorded if recorded[k] != today[k]})
        for kernel, step in (("step4_tensorcore[pv]", "step4_tensorcore"),
                             ("step2_tiled[tiles]", "step2_tiled")):
            shutil.rmtree(other)
            shutil.copytree(results, other)
            flipped = dict(run_json)
            flipped["provenance"] = dict(run_json["provenance"], sources=dict(
                run_json["provenance"]["sources"], kernels=dict(
                    recorded, **{kernel: "0" * 16 if kernel not in changed else today[kernel]})))
            (other / "run.json").write_text(json.dumps(flipped))
            r = run(*tool, other, "--check")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn(f"{step}/README.md", r.stderr)
            table = gpu_report.chapter_table(step, dict(flipped, dir="h200"),
                                             gpu_report.read_csv(other / "timings.csv"),
                                             gpu_report.changed_kernels(flipped))
            row = next(line for line in table.splitlines()
                       if line.startswith(f"| {kernel.split('[')[0][4]}.") and
                       kernel.split("[")[1][:-1] in line.split("|")[1])
            self.assertEqual(gpu_report.CHANGED_MARK in row, kernel not in changed, row)
        # A run that recorded no sources says so, and marks nothing
        del flipped["provenance"]["sources"]
        self.assertIsNone(gpu_report.changed_kernels(flipped))
        table = gpu_report.chapter_table("step4_tensorcore", dict(flipped, dir="h200"),
                                         gpu_report.read_csv(other / "timings.csv"), None)
        self.assertNotIn(gpu_report.CHANGED_MARK, table)
        self.assertIn("recorded no hash of its kernels' sources", table)
        # The README's block is the chart and a caption that says how many kernels changed; the
        # details file lists them and the counts beside ncu, from the files
        readme, details = self.tmp / "README.md", self.tmp / "gpus.md"
        readme.write_text("# x\n<!-- gpu-results:begin -->\nold\n<!-- gpu-results:end -->\n")
        details.write_text("<!-- gpu-run-details:begin -->\n<!-- gpu-run-details:end -->\n")
        r = run(sys.executable, ROOT / "scripts" / "gpu_report.py", "readme", readme, "--details",
                details, results)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        text = readme.read_text()
        self.assertIn("chart.png)", text)
        self.assertNotIn("Of the 161 figures", text)
        text = details.read_text()
        self.assertIn("Of the 161 figures Nsight Compute and the CPU backend both counted", text)
        if changed:
            self.assertIn("Kernels changed since the run, whose figures measured an older version",
                          text)
            self.assertIn(sorted(changed)[0], text.split("older version")[1])
        self.assert_refused(run(sys.executable, ROOT / "scripts" / "gpu_report.py", "readme",
                                readme, "--details", readme, results), "gpu-run-details")

    def test_kernel_sources_follow_what_nvcc_includes(self):
        # A kernel's hash covers its .cu file and the repository headers nvcc's compile of it
        # includes, transitively; not those only the CPU backend's compile includes.
        tree = {
            "scripts/ladders.py": (ROOT / "scripts" / "ladders.py").read_text(),
            "step4_tensorcore/rung2_pv.cu": '#include "common/kernel.h"\n#include <vector>\n',
            "step4_tensorcore/attention.cu": '#include "step4_tensorcore/configs.h"\n',
            "step4_tensorcore/configs.h": "// configs\n",
            "common/kernel.h": ('#include "common/launch.h"\n#if defined(__CUDACC__)\n'
                                '#include "common/gpu_only.h"\n#else\n'
                                '#include "common/simt/simt.h"\n#endif\n#ifndef __CUDACC__\n'
                                '#include "common/cpu_only.h"\n#endif\n'),
            "common/launch.h": '#include "where.h"\n',  # beside the file that includes it
            "common/where.h": "// where\n",
            "common/gpu_only.h": "// gpu\n",
            "common/simt/simt.h": "// cpu\n",
            "common/cpu_only.h": "// cpu\n",
        }
        ks = gpu_report.kernel_sources
        ladders = ks.ladders_of(tree.get)
        self.assertEqual(ks.kernel_files("step4_tensorcore[pv]", tree.get, ladders),
                         ["common/gpu_only.h", "common/kernel.h", "common/launch.h",
                          "common/where.h", "step4_tensorcore/rung2_pv.cu"])
        # the step's own kernel and a tile configuration of it: the step's attention.cu
        for label in ("step4_tensorcore", "step4_tensorcore br128_bc64_w8_s2"):
            self.assertEqual(ks.kernel_files(label, tree.get, ladders),
                             ["step4_tensorcore/attention.cu", "step4_tensorcore/configs.h"])
        self.assertEqual(ks.kernel_file("step5_warpspecialized[sm90a]", ladders),
                         "step5_warpspecialized/attention_sm90a.cu")
        self.assertEqual(ks.kernel_file("step5_warpspecialized[sm80]", ladders),
                         "step5_warpspecialized/attention.cu")
        before = ks.kernel_hash("step4_tensorcore[pv]", tree.get, ladders)
        for path, changes in (("common/simt/simt.h", False), ("common/cpu_only.h", False),
                              ("common/where.h", True), ("common/gpu_only.h", True),
                              ("step4_tensorcore/rung2_pv.cu", True)):
            edited = dict(tree, **{path: tree[path] + "// edited\n"})
            self.assertEqual(ks.kernel_hash("step4_tensorcore[pv]", edited.get, ladders) != before,
                             changes, path)
        self.assertIsNone(ks.kernel_hash("step4_tensorcore[gone]", tree.get, ladders))
        # The MANIFEST's block reads back as written
        block = ("sources: how\n  0123456789abcdef step4_tensorcore br128_bc64_w8_s2\n"
                 "  none x\nfiles:\n  ./a 1\n")
        self.assertEqual(ks.parse_manifest(block),
                         {"step4_tensorcore br128_bc64_w8_s2": "0123456789abcdef", "x": None})
        # Bad input: one line, exit 2
        script = ROOT / "scripts" / "kernel_sources.py"
        self.assert_refused(run(sys.executable, script, "--add-to", self.tmp),
                            "not a GPU run's results")
        self.assert_refused(run(sys.executable, script, "--bogus"), "usage")
        r = subprocess.run([sys.executable, str(script), "--manifest"], input="",
                           capture_output=True, text=True)
        self.assert_refused(r, "no kernel labels")

    def test_the_summary_draws_the_timings(self):
        # Rows in timings.csv's columns, from attn_suite on the CPU backend at a small shape and
        # then labelled as the ladder's shapes, with SDPA's and cuBLAS's beside them: what the
        # summary's tables and the chart do with a GPU's rows (the numbers mean nothing).
        shapes = self.tmp / "shapes.txt"
        shapes.write_text("--seq 17 --dim 64\n")
        raw = self.tmp / "raw.csv"
        r = run(BUNDLE / "bin" / "attn_suite", "time", "--backend", "cpu", "--shapes", shapes,
                "--kernels", "steps,rungs", "--iters", "1", "--warmup", "0", "--csv", raw)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(raw) as f:
            rows = list(csv.DictReader(f))
        ladder = []
        for (b, h, seq, d) in ((1, 8, 512, 64), (1, 16, 4096, 128)):
            for row in rows + [dict(rows[0], step="torch_sdpa_flash"),
                               dict(rows[0], step="baseline_cublas")]:
                ladder.append(dict(row, batch=str(b), heads=str(h), heads_kv=str(h),
                                   seqlen_q=str(seq), seqlen_k=str(seq), dim=str(d),
                                   tflops=str(1 + len(ladder)), time_ms="0.5", config=""))
        grid = [dict(ladder[0], seqlen_q="2048", seqlen_k="2048", batch="8", causal="1")]
        # the backward's rows (attn_suite time --backward, bench_torch.py --backward), at the
        # ladder's first shape, in an order of their own: the table puts the ladder's first
        back = [dict(ladder[0], step=name, tflops="70", time_ms="0.25")
                for name in ("torch_sdpa_flash_backward", "step6_backward[sm90a]",
                             "step6_backward[sm80]", "step6_backward[math]",
                             "step6_backward[dq]")]
        forward = gpu_report.timing_section(ladder + grid + back, {"bf16_matmul": 700.0,
                                                                   "copy_bandwidth": 3.0})
        self.assertIn("**fp16 B=1 H=8 S=512 D=64**", forward)
        self.assertIn("| step4_tensorcore[swizzle] | 500 |", forward)
        self.assertIn("| fp16 B=8 H=8 S=2048 D=64 causal |", forward)  # the grid's table
        self.assertNotIn("step6_backward", forward)  # nor in the grid's columns
        self.assertNotIn("_backward", forward)
        backward = gpu_report.backward_section(ladder + grid + back, 700.0)
        self.assertIn("| step6_backward[math] | 250 | 70.0 | 10% |\n"
                      "| step6_backward[dq] | 250 | 70.0 | 10% |\n"
                      "| step6_backward[sm80] | 250 | 70.0 | 10% |\n"
                      "| step6_backward[sm90a] | 250 | 70.0 | 10% |\n"
                      "| torch_sdpa_flash_backward | 250 | 70.0 | 10% |", backward)
        png = self.tmp / "chart.png"
        note = gpu_report.chart(ladder + back, "a title", png)
        self.assertEqual(note, "")
        self.assertGreater(png.stat().st_size, 10000)
        # The chart's bars in course order (scripts/stepdiff.py --list's), whatever the rows'
        # order: the forward's panels, one per shape, then the backward's
        panels = gpu_report.chart_panels(list(reversed(ladder)) + back)
        self.assertEqual([(p["shape"], p["backward"]) for p in panels],
                         [("fp16 B=1 H=8 S=512 D=64", False), ("fp16 B=1 H=16 S=4096 D=128", False),
                          ("fp16 B=1 H=8 S=512 D=64", True)])
        listed = subprocess.run([sys.executable, ROOT / "scripts" / "stepdiff.py", "--list"],
                                capture_output=True, text=True, check=True).stdout.split("\n")
        course = [line.split()[0] for line in listed if line and not line.startswith("0 ")]
        labels = [b[0].split()[0] for b in panels[0]["bars"]]
        self.assertEqual(labels, [c for c in course if c in labels])
        self.assertEqual(set(labels), {c for c in course if not c.startswith("6")})
        names = [b[1] for b in panels[0]["bars"]]
        for earlier, later in (("step1_naive", "step2_tiled[tiles]"),
                               ("step2_tiled[warps]", "step2_tiled"),
                               ("step2_tiled", "step3_fused"),
                               ("step4_tensorcore[keepbits]", "step4_tensorcore"),
                               ("step4_tensorcore", "step5_warpspecialized[sm80]"),
                               ("step5_warpspecialized[sm80]", "step5_warpspecialized[tma]"),
                               ("step5_warpspecialized[split]", "step5_warpspecialized[sm90a]")):
            self.assertLess(names.index(earlier), names.index(later), (earlier, later))
        self.assertEqual(panels[0]["bars"][1][0], "2.1 tiles")
        # each bar's share of the best SDPA backend at that shape (the only one here: flash)
        sdpa = next(float(r["tflops"]) for r in ladder if r["step"] == "torch_sdpa_flash"
                    and r["seqlen_q"] == "512")
        self.assertEqual(panels[0]["best"], ("torch_sdpa_flash", sdpa))
        for _, name, _, tf, share in panels[0]["bars"]:
            self.assertAlmostEqual(share, tf / sdpa)
        self.assertEqual([n for n, _ in panels[0]["lines"]],
                         ["baseline_cublas", "torch_sdpa_flash"])
        # the backward's: step 6's rungs in course order, its own kernel last, SDPA's as a line
        self.assertEqual([b[0] for b in panels[2]["bars"]],
                         ["6.1 math", "6.7 dq", "6 sm80", "6:sm90a"])
        self.assertEqual(panels[2]["lines"], [("torch_sdpa_flash_backward", 70.0)])
        self.assertAlmostEqual(panels[2]["bars"][0][4], 1.0)

    def test_the_bundles_own_report_writes_every_kind_of_row(self):
        # What the stages leave, every kind of row a GPU run writes (the forward's steps, rungs,
        # SDPA and cuBLAS at the ladder's shapes and on the grid; the backward's step 6 and SDPA's
        # backward; the ceilings; check.csv, sanitize.txt, counters.csv; stage e's output), given
        # to the bundle's own copy of the report, as gpu_run.sh gives it: the copy must carry what
        # the report imports. The rows are attn_suite's on the CPU backend at a tiny shape,
        # relabelled as the ladder's shapes (the numbers mean nothing).
        out, work = self.tmp / "out", self.tmp / "work"
        out.mkdir()
        work.mkdir()
        shapes = self.tmp / "shapes.txt"
        shapes.write_text("--seq 17 --dim 64\n")
        raw = self.tmp / "raw.csv"
        for flags in ([], ["--backward"]):
            r = run(BUNDLE / "bin" / "attn_suite", "time", "--backend", "cpu", "--shapes", shapes,
                    "--kernels", "steps", "--iters", "1", "--warmup", "0", "--csv", raw, *flags)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(raw) as f:
            rows = list(csv.DictReader(f))
        columns = list(rows[0])
        kinds = rows + [dict(rows[0], step=n) for n in ("step4_tensorcore[swizzle]",
                                                        "torch_sdpa_flash", "baseline_cublas")]
        kinds += [dict(rows[-1], step=n) for n in ("step6_backward[math]",
                                                   "torch_sdpa_cudnn_backward")]
        timings = []
        for (b, h, seq, d) in ((1, 8, 512, 64), (1, 16, 4096, 128)):
            timings += [dict(row, batch=str(b), heads=str(h), heads_kv=str(h), seqlen_q=str(seq),
                             seqlen_k=str(seq), dim=str(d), tflops="10", time_ms="0.5")
                        for row in kinds]
        timings.append(dict(timings[0], seqlen_q="2048", seqlen_k="2048", batch="8", causal="1"))
        with open(out / "timings.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
            w.writeheader()
            w.writerows(timings)
        (work / "peaks.csv").write_text("measure,value\nbf16_matmul,700\ncopy_bandwidth,3\n")
        (out / "check.csv").write_text("kernel,case,status,detail,backend\n"
                                      "step6_backward,odd,pass,,gpu\nstep1_naive,odd,fail,NaN,gpu\n")
        (out / "sanitize.txt").write_text("### memcheck\nPASS step6_backward: 2 passed, 0 failed, "
                                         "0 skipped\n========= ERROR SUMMARY: 0 errors\n")
        (out / "counters.csv").write_text(
            "kernel,shape,counter,ncu_metrics,cpu,ncu,note\n"
            f"step6_backward,{gpu_report.NCU_SHAPE},mma,m,2048,2048,\n")
        (work / "python.txt").write_text("12 passed, 3 skipped in 9.1s\nstep4_tensorcore 1.2 ms\n")
        with open(work / "stages.jsonl", "w") as f:
            for name in ("a. correctness", "b. compute-sanitizer", "c. timings",
                         "d. Nsight Compute", "e. Python"):
                f.write(json.dumps({"name": name, "limit_s": 60, "took_s": 9,
                                    "status": "passed"}) + "\n")
        report = BUNDLE / "scripts" / "gpu_report.py"
        r = run(sys.executable, report, "summary", BUNDLE, out, work)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        text = (out / "README.md").read_text()
        self.assertNotIn("Not written", text)
        backward = text.split("## c. The backward pass (timings.csv)")[1].split("\n## ")[0]
        self.assertIn("| step6_backward[math] | 500 | 10.0 | 1% |\n"
                      "| step6_backward[sm80] | 500 | 10.0 | 1% |\n"
                      "| step6_backward[sm90a] | 500 | 10.0 | 1% |\n"
                      "| torch_sdpa_cudnn_backward |", backward)
        self.assertIn("| step4_tensorcore[swizzle] | 500 |", text)
        self.assertIn("| fp16 B=8 H=8 S=2048 D=64 causal |", text)
        self.assertIn("| step1_naive | 0 | 1 | 0 | odd: NaN |", text)
        self.assertIn("12 passed, 3 skipped", text.split("## e. ")[1])
        self.assertEqual(json.loads((out / "run.json").read_text())["sections_not_written"], [])
        self.assertTrue((out / "chart.png").exists())
        # A bundle without a script the report imports: the report is still written, every
        # section but those that need it (the backward's table, the chart: both go in the
        # course's order, scripts/ladders.py), which say why in one line; exit status 1.
        broken = self.tmp / "broken"
        shutil.copytree(BUNDLE / "scripts", broken / "scripts")
        (broken / "scripts" / "ladders.py").unlink()
        for name in ("README.md", "run.json"):
            (out / name).unlink()
        r = run(sys.executable, broken / "scripts" / "gpu_report.py", "summary", broken, out, work)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        text = (out / "README.md").read_text()
        backward = text.split("## c. The backward pass (timings.csv)")[1].split("\n## ")[0]
        self.assertEqual(backward.strip().splitlines(), [
            "Not written: the report's code failed here (FileNotFoundError: [Errno 2] No such file "
            f"or directory: '{broken / 'scripts' / 'ladders.py'}')."])
        self.assertIn("| step4_tensorcore[swizzle] | 500 |", text)
        self.assertIn("12 passed, 3 skipped", text)
        timings = text.split("## c. Timings (timings.csv)")[1].split("\n## ")[0]
        self.assertIn("Not written: the report's code failed here (ModuleNotFoundError", timings)
        run_json = json.loads((out / "run.json").read_text())
        self.assertEqual(len(run_json["sections_not_written"]), 2)
        self.assertIn("section not written: c. The backward pass: FileNotFoundError", r.stderr)
        self.assertIn("section not written: c. Timings, the chart: ModuleNotFoundError", r.stderr)

    def test_the_suite_times_on_the_cpu_backend(self):
        shapes = self.tmp / "shapes.txt"
        shapes.write_text("--batch 1 --heads 2 --seq 33 --dim 64  # odd\n\n--seq 17 --dim 128 "
                          "--dtype bf16 --causal\n")
        suite = BUNDLE / "bin" / "attn_suite"
        out = self.tmp / "t.csv"
        # --cap-ms out of reach: on a loaded machine a run of the first shape can take long enough
        # for the default cap (40 ms) to leave out the second
        no_cap = ("--cap-ms", "1e9")
        r = run(suite, "time", "--backend", "cpu", "--shapes", shapes, "--kernels", "steps",
                "--iters", "1", "--warmup", "0", *no_cap, "--csv", out)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(out) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(len(rows), 12)  # six kernels, two shapes
        self.assertEqual({r["seqlen_q"] for r in rows}, {"33", "17"})
        # and a cap below any run: each kernel runs the first shape, which predicts the second
        capped = self.tmp / "capped.csv"
        r = run(suite, "time", "--backend", "cpu", "--shapes", shapes, "--kernels", "steps",
                "--iters", "1", "--warmup", "0", "--cap-ms", "1e-6", "--csv", capped)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(capped) as f:
            self.assertEqual({r["seqlen_q"] for r in csv.DictReader(f)}, {"33"})
        self.assertEqual(r.stdout.count("(over --cap-ms 1e-06)"), 6, r.stdout)
        # --backward: step 6 and its rungs alone, their FLOPs 2.5 times the forward's
        back = self.tmp / "b.csv"
        r = run(suite, "time", "--backend", "cpu", "--shapes", shapes, "--kernels", "steps,rungs",
                "--backward", "--iters", "1", "--warmup", "0", *no_cap, "--csv", back)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(back) as f:
            brows = list(csv.DictReader(f))
        listed = run(suite, "list", "--kernels", "steps,rungs").stdout.splitlines()
        backward = [k for k in listed if k.startswith("step6_backward")]
        self.assertGreaterEqual(len(backward), 8)  # the step's own kernel and its rungs
        self.assertEqual(len(brows), 2 * len(backward))  # each of them at both shapes
        self.assertEqual({r["step"].split("[")[0] for r in brows}, {"step6_backward"})
        fwd = {(r["seqlen_q"], r["dim"]): float(r["flops"]) for r in rows}
        for b in brows:
            self.assertAlmostEqual(float(b["flops"]), 2.5 * fwd[(b["seqlen_q"], b["dim"])])
        self.assert_refused(run(suite, "time", "--shapes", shapes, "--kernels", "baseline",
                                "--backward"), "no backward kernel in them")
        shapes.write_text("--seq 17 --rung 2\n")
        self.assert_refused(run(suite, "time", "--shapes", shapes), "problem's flags alone")
        # a run longer than --hang counts as a hang: the process ends, naming it (exit status 4)
        shapes.write_text("--batch 4 --heads 8 --seq 512 --dim 128\n")
        r = run(suite, "time", "--backend", "cpu", "--shapes", shapes, "--kernels", "steps",
                "--iters", "1", "--warmup", "0", "--hang", "0.01")
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertIn("attn_suite: step1_naive on fp16 B=4 H=8 Sq=512 Sk=512 D=128 has not "
                      "returned after", r.stdout)
        self.assert_refused(run(suite, "check", "--kernels", "mine"), "unknown kernel set")
        self.assert_refused(run(suite, "run", "step9"), "unknown step 'step9'")


if __name__ == "__main__":
    unittest.main()
