// The shared command line and the exit-code contract: 0 ran and passed, 1 ran and failed its
// check, 2 invalid input or unavailable backend, always with a one-line reason.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/cli.h"
#include "common/harness.h"
#include "common/tensors.h"

namespace {

struct Run {
  int code;
  std::string out;  // stdout and stderr together
};

// `step` is a step's name, or a whole command (with a '/': its path, perhaps after variables).
Run run(const std::string& args, const std::string& step = "step0_reference") {
  const std::string log = "/tmp/attn_cli_test_" + std::to_string(::getpid()) + ".log";
  const std::string exe =
      step.find('/') == std::string::npos ? std::string(ATTN_BIN_DIR) + "/" + step : step;
  const std::string cmd = exe + " " + args + " >" + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(log.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace

TEST_CASE("cli: the acceptance example runs and passes (exit 0)", "[cli]") {
  const Run r = run("--seq 129 --dim 80 --causal --dtype bf16");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("check PASSED"));
}

TEST_CASE("cli: --iters 0 is the checked run alone (what a profiler measures)", "[cli]") {
  const Run r = run("--seq 17 --iters 0 --warmup 0");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("check PASSED"));
}

TEST_CASE("cli: invalid input exits 2 with one line", "[cli]") {
  for (const char* args :
       {"--dim 0", "--heads 6 --heads-kv 4", "--dropout 1.5", "--seq abc", "--no-such-flag",
        "--dtype fp8", "--backend gpu", "--backend tpu", "--seqlens-k 5,6", "--seq 8 --seqlen-q 4",
        "--iters -1", "--schedule sideways", "--heads-kv 0",
        // output paths are opened before any work: as root, a check of the directory passed and
        // the run went on, to fail at the end
        "--csv /proc/x.csv", "--save /proc/x.safetensors"}) {
    INFO(args);
    const Run r = run(args);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(lines(r.out) == 1);
    CHECK_THAT(r.out, Catch::StartsWith("step0_reference: "));
  }
}

TEST_CASE("cli: --counters is refused with one line where it cannot count", "[cli]") {
  // The model's GPU without a counted run, a GPU the model does not know, the GPU backend (which
  // ncu measures instead); step 0, which runs no kernel, has no such flag.
  for (const auto& [args, why] : std::vector<std::pair<std::string, std::string>>{
           {"--model-gpu L4", "--model-gpu models a counted run: add --counters"},
           {"--counters --model-gpu V100", "not a GPU the model knows (H100 SXM, A100 SXM 80GB"},
           {"--counters --backend gpu", "--counters counts on the CPU backend"}}) {
    INFO(args);
    const Run r = run(args, "step3_fused");
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(lines(r.out) == 1);
    CHECK_THAT(r.out, Catch::Contains(why));
  }
  const Run r = run("--counters");
  CHECK(r.code == 2);
  CHECK(lines(r.out) == 1);
  CHECK_THAT(r.out, Catch::Contains("not expected: --counters"));
}

TEST_CASE("cli: below compute capability 8.0 steps 4 and 5 refuse in one line, steps 1-3 run",
          "[cli]") {
  // The CPU backend presenting itself as a T4 (sm_75), as a GPU of that kind would be seen.
  for (const char* step : {"step4_tensorcore", "step5_warpspecialized"}) {
    INFO(step);
    const Run r = run("--backend cpu --seq 17",
                      std::string("SIMT_PRESENT_AS=sm_75 ") + ATTN_BIN_DIR + "/" + step);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(lines(r.out) == 1);
    CHECK_THAT(r.out, Catch::StartsWith(std::string(step) +
                                        ": needs compute capability 8.0 (sm_80) or newer, for "
                                        "mma.sync m16n8k16 (bf16)"));
    CHECK_THAT(r.out,
               Catch::Contains("the CPU backend presents itself as sm_75 (SIMT_PRESENT_AS)"));
  }
  for (const char* step : {"step1_naive", "step2_tiled", "step3_fused"}) {
    INFO(step);
    const Run r = run("--backend cpu --seq 17 --causal",
                      std::string("SIMT_PRESENT_AS=sm_75 ") + ATTN_BIN_DIR + "/" + step);
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("check PASSED"));
  }
  // Ampere: steps 5 and 6 run their sm_80 kernels, and refuse the Hopper ones and their rungs.
  for (const char* step : {"/step5_warpspecialized", "/step6_backward"})
    for (const char* args : {"--variant sm90a", "--rung tma"}) {
      INFO(step << " " << args);
      const Run r = run(std::string("--backend cpu --seq 17 ") + args,
                        std::string("SIMT_PRESENT_AS=sm_80 ") + ATTN_BIN_DIR + step);
      INFO(r.out);
      CHECK(r.code == 2);
      CHECK(lines(r.out) == 1);
      CHECK_THAT(r.out, Catch::Contains("needs a compute capability 9.0 GPU (the CPU backend "
                                        "presents itself as 8.0)"));
    }
  CHECK(run("--backend cpu --seq 17",
            std::string("SIMT_PRESENT_AS=sm_80 ") + ATTN_BIN_DIR + "/step5_warpspecialized")
            .code == 0);
  const Run bad = run("--backend cpu --seq 17",
                      std::string("SIMT_PRESENT_AS=turing ") + ATTN_BIN_DIR + "/step1_naive");
  CHECK(bad.code == 2);
  CHECK(lines(bad.out) == 1);
  CHECK_THAT(bad.out, Catch::Contains("SIMT_PRESENT_AS=turing: not an architecture name"));
  // The SMs it presents to a persistent grid: a whole number from 1 to 1024, or a refusal.
  for (const char* sms : {"0", "1025", "4x", "-3"}) {
    INFO(sms);
    const Run r = run("--backend cpu --seq 17", std::string("SIMT_SMS=") + sms + " " +
                                                    ATTN_BIN_DIR + "/step5_warpspecialized");
    CHECK(r.code == 2);
    CHECK(lines(r.out) == 1);
    CHECK_THAT(r.out, Catch::Contains(std::string("SIMT_SMS=") + sms + ": not a count of SMs"));
  }
  CHECK(run("--backend cpu --seq 300 --causal --variant sm90a",
            std::string("SIMT_SMS=1 ") + ATTN_BIN_DIR + "/step5_warpspecialized")
            .code == 0);
}

TEST_CASE("cli: each step's --help and flags are its own", "[cli]") {
  // step 0 runs no kernel: no --schedule, --variant, --config or --counters (they used to be
  // listed and silently accepted); every step's --help says which head dims it takes.
  const Run help0 = run("--help");
  CHECK_THAT(help0.out, Catch::Contains("head dimension (any from 1 to 256)"));
  for (const char* flag : {"--schedule", "--variant", "--config", "--counters", "--model-gpu"})
    CHECK_THAT(help0.out, !Catch::Contains(flag));
  for (const char* args : {"--schedule greedy", "--variant sm80", "--config x"}) {
    INFO(args);
    const Run r = run(args);
    CHECK(r.code == 2);
    CHECK(lines(r.out) == 1);
    CHECK_THAT(r.out, Catch::Contains("not expected"));
  }
  const Run help3 = run("--help", "step3_fused");
  CHECK_THAT(help3.out, Catch::Contains("head dimension (this step: 64, 80, 96, 128)") &&
                            Catch::Contains("--schedule") && !Catch::Contains("--variant") &&
                            !Catch::Contains("--config"));
  const Run help5 = run("--help", "step5_warpspecialized");
  CHECK_THAT(help5.out,
             Catch::Contains("kernel variant: sm80, sm90a") && !Catch::Contains("--config"));
  CHECK_THAT(run("--help", "step4_tensorcore").out,
             Catch::Contains("--config") && !Catch::Contains("--variant"));
}

TEST_CASE("cli: messages name what the user gave", "[cli]") {
  // --seq 0 is named as --seq (it was reported as --seqlen-q 0).
  const Run seq = run("--seq 0");
  CHECK(seq.code == 2);
  CHECK_THAT(seq.out, Catch::Contains("--seq 0: must be at least 1"));
  // A scale too large says why a score under FP32's limit is still too large.
  const Run scale = run("--scale 1e36 --no-check");
  CHECK(scale.code == 2);
  CHECK(lines(scale.out) == 1);
  CHECK_THAT(scale.out, Catch::Contains("2 log2(e) = 2.885 times that"));
}

TEST_CASE("cli: --counters on a kernel step prints the counters and the model", "[cli]") {
  // bin/step3_fused has no counted copy of its own: it runs bin/counted/step3_fused, or says why
  // not (a build without counted copies).
  const std::string cmd =
      std::string(ATTN_BIN_DIR) + "/step3_fused --backend cpu --seq 40 --heads 1 --counters 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int status = pclose(p);
  INFO(out);
  if (WEXITSTATUS(status) == 2) {
    CHECK_THAT(out, Catch::Contains("this build has no counted copy of step3_fused"));
    return;
  }
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_THAT(out, Catch::Contains("check PASSED") &&
                      Catch::Contains("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum") &&
                      Catch::Contains("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum") &&
                      Catch::Contains("speed-of-light MODEL") && Catch::Contains("H100 SXM: ") &&
                      Catch::Contains("us model, bound by"));
}

TEST_CASE("cli: --instrumented runs the kernels' instrumented copy, and says so", "[cli]") {
  // bin/step3_fused runs bin/counted/step3_fused, whose checked run checks every access: each
  // launch is the instrumented copy's (SIMT_LOG_LAUNCHES names the copy that ran). Refused where
  // it cannot run, in one line.
  const std::string log = "/tmp/attn_cli_launches_" + std::to_string(::getpid()) + ".log";
  const Run r = run("--backend cpu --seq 40 --heads 1 --iters 0 --warmup 0 --instrumented",
                    "SIMT_LOG_LAUNCHES=" + log + " " + ATTN_BIN_DIR + "/step3_fused");
  std::ifstream in(log);
  std::stringstream launches;
  launches << in.rdbuf();
  std::remove(log.c_str());
  INFO(r.out);
  INFO(launches.str());
  if (r.code == 2) {
    CHECK_THAT(r.out, Catch::Contains("this build has no counted copy of step3_fused"));
  } else {
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("check PASSED") &&
                          Catch::Contains("every access of the checked run checked"));
    CHECK(lines(launches.str()) == 1);  // step 3 launches once: the checked run, nothing timed
    CHECK_THAT(launches.str(), !Catch::Contains(" plain\n"));
  }
  for (const auto& [args, why] : std::vector<std::pair<std::string, std::string>>{
           {"--instrumented --counters", "--counters checks every access already"},
           {"--instrumented --backend gpu", "--instrumented checks on the CPU backend"},
           {"--instrumented --csv /tmp/x.csv", "drop --csv"}}) {
    INFO(args);
    const Run bad = run(args, "step3_fused");
    INFO(bad.out);
    CHECK(bad.code == 2);
    CHECK(lines(bad.out) == 1);
    CHECK_THAT(bad.out, Catch::Contains(why));
  }
  CHECK_THAT(run("--instrumented").out, Catch::Contains("not expected: --instrumented"));
}

TEST_CASE("cli: --help exits 0 and lists the shared flags", "[cli]") {
  const Run r = run("--help");
  CHECK(r.code == 0);
  for (const char* flag :
       {"--backend", "--batch", "--heads", "--heads-kv", "--seqlen-q", "--seqlen-k", "--seq",
        "--dim", "--dtype", "--causal", "--seqlens-k", "--dropout", "--seed", "--scale", "--iters",
        "--warmup", "--csv", "--no-check"})
    CHECK_THAT(r.out, Catch::Contains(flag));
}

TEST_CASE("cli: flags reach the problem", "[cli]") {
  attn::Options o;
  const char* argv[] = {
      "x",          "--batch",  "3",           "--heads", "8",         "--heads-kv", "2",
      "--seqlen-q", "5",        "--seqlen-k",  "9",       "--dim",     "96",         "--dtype",
      "bf16",       "--causal", "--seqlens-k", "9,0,4",   "--dropout", "0.25",       "--seed",
      "42",         "--scale",  "0.5",         "--iters", "3",         "--warmup",   "0",
      "--no-check", "--csv",    "out.csv"};
  const auto r = attn::parse_cli(static_cast<int>(std::size(argv)), argv, "x", o);
  REQUIRE(r.exit_code == -1);
  const attn::Problem& p = o.problem;
  CHECK(p.batch == 3);
  CHECK(p.heads == 8);
  CHECK(p.kv_heads() == 2);
  CHECK(p.seqlen_q == 5);
  CHECK(p.seqlen_k == 9);
  CHECK(p.dim == 96);
  CHECK(p.dtype == attn::DType::bf16);
  CHECK(p.causal);
  CHECK(p.seqlens_k == std::vector<int>{9, 0, 4});
  CHECK(p.dropout == 0.25f);
  CHECK(p.seed == 42);
  CHECK(p.softmax_scale() == 0.5f);
  CHECK(o.iters == 3);
  CHECK(o.warmup == 0);
  CHECK_FALSE(o.check);
  CHECK(o.csv == "out.csv");
}

namespace {
// A step that computes nothing useful: O = 0, LSE = 0.
void wrong_step(const attn::AttentionParams& p, attn::RunContext&) {
  const int64_t n = int64_t(p.batch) * p.heads * p.seqlen_q;
  auto* o = static_cast<attn::Bits16*>(p.o);
  for (int64_t x = 0; x < n * p.dim; ++x) o[x] = 0;
  for (int64_t x = 0; x < n; ++x) p.lse[x] = 0.0f;
}
}  // namespace

TEST_CASE("cli: a step that fails its check exits 1", "[cli]") {
  const char* argv[] = {"wrong_step", "--seq", "16", "--iters", "1"};
  const int code =
      attn::step_main(5, const_cast<char**>(argv), {.name = "wrong_step", .cpu = &wrong_step});
  CHECK(code == 1);
}

TEST_CASE("cli: --csv appends a row, and --no-check still records the run", "[cli]") {
  const std::string csv = "/tmp/attn_cli_test_" + std::to_string(::getpid()) + ".csv";
  std::remove(csv.c_str());
  CHECK(run("--seq 17 --csv " + csv).code == 0);
  CHECK(run("--seq 17 --no-check --csv " + csv).code == 0);
  std::ifstream in(csv);
  std::string header, a, b;
  std::getline(in, header);
  std::getline(in, a);
  std::getline(in, b);
  CHECK(header.rfind("step,backend,", 0) == 0);
  CHECK(a.rfind("step0_reference,cpu,", 0) == 0);
  CHECK_THAT(a, Catch::Contains(",1,1,"));  // checked, passed
  CHECK_THAT(b, Catch::Contains(",0,,"));   // not checked, passed left empty
  std::remove(csv.c_str());
}
