// The steps' CPU kernels with every load and store checked (common/simt/checks.cpp): the steps
// pass the matrix with no report, and each bug class the checks exist for, planted into a copy
// of a step (tests/CMakeLists.txt: attn_planted_copy) or by fault injection, is reported with the
// kernel's source line, the block and thread, the buffer and what happened.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>

#include "common/check.h"
#include "common/harness.h"
#include "common/kernel.h"
#include "common/ptx.h"
#include "common/simt/memory.h"
#include "common/simt/ptx.h"
#include "tests/matrix.h"
#include "tests/scoped_env.h"
#include "tests/simt_buffer.h"

// The instrumented CPU copies of the kernels, the steps' counted copies (no GPU copy is linked
// into this binary).
namespace step1::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6::sm90a::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6::rung1::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6::rung2::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6::rung3::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6::rung4::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6::rung5::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6::rung6::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6::rung7::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6::rung8::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6::rung9::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6::rung10::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step2::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step3::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step4::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step2::rung1::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step2::rung2::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step4::rung1::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step4::rung2::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step4::rung3::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step4::rung4::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step4::rung5::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step4::rung6::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step4::rung7::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step4::rung8::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step4::rung9::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step4::rung10::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::rung1::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::rung2::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::rung3::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::rung4::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::rung5::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::rung6::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::rung7::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::rung8::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::rung9::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::rung10::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::counted {
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}  // namespace step5::counted
namespace step5_row_guard::cpu {  // the output row guard off by one, in both kernels (bf16, D 64)
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}  // namespace step5_row_guard::cpu
namespace step5_wrong_stage::cpu {  // the sm_80 consumer reading the next ring slot (bf16, D 64)
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step2_planted::cpu {  // the float4 path for P whenever Sk is even
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step3_planted::cpu {  // load_rows_16B's zero-fill bound written row <= valid_rows
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}

namespace {

const std::vector<int> kHeadDims = {64, 80, 96, 128};

attn::RunOutcome run(const attn::StepInfo& step, const attn::Problem& p,
                     const std::string& schedule = "forward") {
  attn::Options o;
  o.problem = p;
  o.iters = 0;  // the checked run alone
  o.warmup = 0;
  o.backend = "cpu";
  o.schedule = schedule;
  return attn::run_step(step, o);
}

// long_problems: false leaves out the matrix's 1000-key problems, which exist to take a kernel's
// K/V ring round twice and give it three query blocks (tests/matrix.h): a kernel with no ring
// whose tiles the shorter problems already cover many times (step 6's: 16 keys and 16 rows;
// 129 keys is nine tiles) reaches nothing there they do not, and checking its every access at
// that length costs three times the rest (step 6's first rung: 9 s against 2.6 on two
// workers). ATTN_MATRIX=full runs them all.
void run_matrix(const attn::StepInfo& step, const std::string& schedule,
                bool long_problems = true) {
  for (const attn::Problem& p : attn_test::matrix()) {
    if (!step.head_dims.empty() &&
        std::find(step.head_dims.begin(), step.head_dims.end(), p.dim) == step.head_dims.end())
      continue;
    if (!long_problems && !attn_test::full_matrix() && p.seqlen_k >= 1000) continue;
    const attn::RunOutcome r = run(step, p, schedule);
    INFO(step.name << " [instrumented, " << schedule << "] " << p.describe() << "\n"
                   << r.message << "\n"
                   << r.row.check.first_failure);
    REQUIRE(r.exit_code == 0);
    REQUIRE(r.row.check.passed);
  }
}

// The line of the first line of `file` (relative to the source root) containing `text`.
std::string line_of(const std::string& file, const std::string& text) {
  std::ifstream in(std::string(ATTN_SOURCE_DIR) + "/" + file);
  int n = 0;
  for (std::string line; std::getline(in, line);)
    if (++n, line.find(text) != std::string::npos) return file + ":" + std::to_string(n);
  return file + ": '" + text + "' not found";
}

}  // namespace

TEST_CASE("instrumented step1 passes the matrix with no access reported", "[instrumented]") {
  run_matrix({.name = "step1_naive", .cpu = &step1::counted::run}, "forward");
}
// The long problems are left out (run_matrix): step 6's own kernel reuses each of its two
// buffers in the shorter ones (the test "the shorter problems reach step 6's tiles"), and no rung
// before it has a ring. Two tests, so that CTest runs them side by side.
TEST_CASE("instrumented step6 and its tensor-core rungs pass the matrix with no access reported",
          "[instrumented]") {
  for (const auto& [name, fn] : {std::pair{"step6_backward", &step6::counted::run},
                                 {"step6_backward[elementwise]", &step6::rung10::counted::run},
                                 {"step6_backward[pipeline]", &step6::rung9::counted::run},
                                 {"step6_backward[deterministic]", &step6::rung8::counted::run},
                                 {"step6_backward[dq]", &step6::rung7::counted::run},
                                 {"step6_backward[registers]", &step6::rung6::counted::run},
                                 {"step6_backward[mma]", &step6::rung5::counted::run}})
    run_matrix({.name = name, .cpu = fn, .backward = true}, "random:5", false);
}
TEST_CASE(
    "instrumented step6 rungs math to fused and sm90a pass the matrix with no access reported",
    "[instrumented]") {
  for (const auto& [name, fn] : {std::pair{"step6_backward[sm90a]", &step6::sm90a::counted::run},
                                 {"step6_backward[math]", &step6::rung1::counted::run},
                                 {"step6_backward[atomics]", &step6::rung2::counted::run},
                                 {"step6_backward[tiles]", &step6::rung3::counted::run},
                                 {"step6_backward[fused]", &step6::rung4::counted::run}})
    run_matrix({.name = name, .cpu = fn, .backward = true}, "random:5", false);
}
TEST_CASE("instrumented step2 passes the matrix with no access reported", "[instrumented]") {
  run_matrix({.name = "step2_tiled", .cpu = &step2::counted::run, .head_dims = kHeadDims},
             "forward");
}
TEST_CASE("instrumented step3 passes the matrix with no access reported", "[instrumented]") {
  run_matrix({.name = "step3_fused", .cpu = &step3::counted::run, .head_dims = kHeadDims},
             "greedy");
}
TEST_CASE("instrumented step4 passes the matrix with no access reported", "[instrumented]") {
  run_matrix({.name = "step4_tensorcore", .cpu = &step4::counted::run, .head_dims = kHeadDims},
             "greedy");
}
TEST_CASE("instrumented step2 rungs pass the matrix with no access reported", "[instrumented]") {
  run_matrix(
      {.name = "step2_tiled[tiles]", .cpu = &step2::rung1::counted::run, .head_dims = kHeadDims},
      "forward");
  run_matrix(
      {.name = "step2_tiled[warps]", .cpu = &step2::rung2::counted::run, .head_dims = kHeadDims},
      "forward");
}
TEST_CASE("instrumented step4 rungs pass the matrix with no access reported", "[instrumented]") {
  const std::pair<const char*, attn::StepFn> rungs[] = {
      {"mma", &step4::rung1::counted::run},       {"pv", &step4::rung2::counted::run},
      {"registers", &step4::rung3::counted::run}, {"swizzle", &step4::rung4::counted::run},
      {"pipeline", &step4::rung5::counted::run},  {"exp2", &step4::rung6::counted::run},
      {"unmasked", &step4::rung7::counted::run},  {"immediates", &step4::rung8::counted::run},
      {"copies", &step4::rung9::counted::run},    {"keepbits", &step4::rung10::counted::run},
  };
  for (const auto& [name, fn] : rungs)
    run_matrix(
        {.name = std::string("step4_tensorcore[") + name + "]", .cpu = fn, .head_dims = kHeadDims},
        "greedy");
}

TEST_CASE("instrumented step5 rungs pass the matrix with no access reported", "[instrumented]") {
  const std::pair<const char*, attn::StepFn> rungs[] = {
      {"tma", &step5::rung1::counted::run},        {"wgmma", &step5::rung2::counted::run},
      {"warpgroups", &step5::rung3::counted::run}, {"pingpong", &step5::rung4::counted::run},
      {"overlap", &step5::rung5::counted::run},    {"budget", &step5::rung6::counted::run},
      {"persistent", &step5::rung7::counted::run}, {"lpt", &step5::rung8::counted::run},
      {"shapes", &step5::rung9::counted::run},     {"split", &step5::rung10::counted::run},
  };
  for (const auto& [name, fn] : rungs)
    run_matrix({.name = std::string("step5_warpspecialized[") + name + "]",
                .cpu = fn,
                .head_dims = kHeadDims},
               "greedy");
}

// step5's two kernels, the ring's producer and consumers and the Hopper emulations included.
void run_step5(const std::string& variant, const std::string& schedule) {
  const attn::StepInfo step{
      .name = "step5_warpspecialized",
      .cpu = variant == "sm90a" ? &step5::counted::run_sm90a : &step5::counted::run,
      .head_dims = kHeadDims};
  run_matrix(step, schedule);
}
TEST_CASE("instrumented step5 sm80 passes the matrix with no access reported", "[instrumented]") {
  run_step5("sm80", "reverse");
}
TEST_CASE("instrumented step5 sm90a passes the matrix with no access reported", "[instrumented]") {
  run_step5("sm90a", "random:5");
}
// On 132 SMs, where it splits 8 of the matrix's problems' keys: the parts' fp32 outputs and
// log-sum-exps, and the kernel that merges them, are checked access by access too.
TEST_CASE("instrumented step5 sm90a with its keys split passes the matrix with no access reported",
          "[instrumented]") {
  const attn_test::ScopedEnv sms("SIMT_SMS", "132");
  run_step5("sm90a", "forward");
}

TEST_CASE("out-of-bounds write: step5's output row guard off by one, in both kernels",
          "[instrumented]") {
  for (const bool hopper : {false, true}) {
    const std::string file =
        std::string("step5_warpspecialized/") + (hopper ? "attention_sm90a.cu" : "attention.cu");
    // The epilogue's store of O, behind the (planted) guard.
    const std::string store = line_of(file, "*reinterpret_cast<uint32_t*>(o + dt * 8 + 2 * t) =");
    const attn::StepInfo planted{
        .name = "step5_warpspecialized",
        .cpu = hopper ? &step5_row_guard::cpu::run_sm90a : &step5_row_guard::cpu::run};
    // 70 query rows: the blocks' row 70 (block 1's row 6, or the Hopper block's row 70) is one
    // past the end of O and LSE.
    const attn::RunOutcome r =
        run(planted, attn_test::make(1, 1, 1, 70, 90, 64, attn::DType::bf16, false));
    INFO(file << ": " << r.message);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.message,
               Catch::Contains("block (") && Catch::Contains("thread (") &&
                   Catch::Contains("out-of-bounds write") &&
                   (Catch::Contains("of buffer 'O'") || Catch::Contains("of buffer 'LSE'")) &&
                   Catch::Contains("past its end at " + store));
  }
}

TEST_CASE("a ring stage read that nothing wrote: step5 sm80's consumer one slot ahead",
          "[instrumented]") {
  const std::string file = "step5_warpspecialized/attention.cu";
  const attn::StepInfo planted{.name = "step5_warpspecialized",
                               .cpu = &step5_wrong_stage::cpu::run};
  // One K/V tile: slot 2 is never written. More: it holds copies in flight, or not yet issued.
  for (int sk : {40, 300}) {
    const attn::RunOutcome r =
        run(planted, attn_test::make(1, 1, 1, 64, sk, 64, attn::DType::bf16, false));
    INFO("Sk " << sk << ": " << r.message);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.message,
               Catch::Contains("ldmatrix at " + file + ":") &&
                   (Catch::Contains("which nothing has written since the block started") ||
                    Catch::Contains("has not landed (it lands when mbarrier full")));
  }
}

TEST_CASE("misaligned vector load: step2's float4 path for P when Sk % 4 == 2", "[instrumented]") {
  const attn::StepInfo planted{.name = "step2_tiled", .cpu = &step2_planted::cpu::run};
  const std::string load = line_of("step2_tiled/attention.cu", "*reinterpret_cast<const float4*>");
  for (int sk : {66, 130}) {
    const attn::RunOutcome r =
        run(planted, attn_test::make(1, 2, 2, 40, sk, 64, attn::DType::fp16, false));
    INFO("Sk = " << sk << ": " << r.message);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.message, Catch::Contains("block (") && Catch::Contains("thread (") &&
                              Catch::Contains("misaligned address: ") &&
                              Catch::Contains("float4', which needs 16-byte alignment, at an "
                                              "address aligned to 8 bytes") &&
                              Catch::Contains("of buffer 'S/P'") && Catch::Contains("at " + load));
  }
  // Sk % 4 == 0: every row of P is 16-byte aligned, and the planted copy is right.
  const attn::RunOutcome ok =
      run(planted, attn_test::make(1, 2, 2, 40, 68, 64, attn::DType::fp16, false));
  INFO(ok.message);
  CHECK(ok.exit_code == 0);
}

TEST_CASE("out-of-bounds read: load_rows_16B reading the row at valid_rows", "[instrumented]") {
  const attn::StepInfo planted{.name = "step3_fused", .cpu = &step3_planted::cpu::run};
  const std::string load = line_of("common/tiles.h", "data = *reinterpret_cast<const uint4*>");
  // 17 rows of Q and K: the last tile's row 17 lies past the end of both tensors.
  const attn::RunOutcome r =
      run(planted, attn_test::make(1, 1, 1, 17, 17, 64, attn::DType::fp16, false));
  INFO(r.message);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.message,
             Catch::Contains("block (0,0,0) thread (") &&
                 Catch::Contains("out-of-bounds read: 16-byte access at byte 2176 of buffer 'Q' "
                                 "(2176 bytes): 16 bytes past its end") &&
                 Catch::Contains("at " + load + ", inlined into step3_fused/attention.cu:"));
}

TEST_CASE("intra-warp ordering: step3 without its __syncwarp before the P V loop",
          "[instrumented]") {
  // The row's 8 threads store P to shared memory, combine their sums with shuffles, and read each
  // other's P: without the __syncwarp, nothing makes one lane's stores visible to another.
  const std::string syncwarp = line_of("step3_fused/attention.cu", "__syncwarp();");
  const std::string read = line_of("step3_fused/attention.cu", "const float pr = Ps[");
  const int line = std::stoi(syncwarp.substr(syncwarp.find(':') + 1));
  const attn::StepInfo step{.name = "step3_fused", .cpu = &step3::counted::run};
  const attn::Problem p = attn_test::make(1, 2, 2, 40, 50, 64, attn::DType::fp16, true);
  REQUIRE(run(step, p).exit_code == 0);
  simt::testing::skip_barrier_at("step3_fused/attention.cu", line);
  const attn::RunOutcome r = run(step, p);
  simt::testing::skip_barrier_at(nullptr, 0);
  INFO(r.message);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.message, Catch::Contains("block (") && Catch::Contains("thread (") &&
                            Catch::Contains("of the same warp stored with no __syncwarp, barrier "
                                            "or fence since") &&
                            Catch::Contains("at " + read));
}

namespace instrumented {
void run_unwritten_read(float* out, int which);
void run_refill_then_read(const float* in, float* out, int wait);
void run_shared_access(float* out, int words, int read);
void run_shared_tail_read(float* out, int at);
void run_global_read(const float* in, float* out, int n, int first);
void run_count(int* counter, unsigned* bits, int threads);
void touch_shared(int word);
void run_restore_then_ldmatrix(uint32_t* out, int sync);
void run_restore_after_barrier(float* out, int sync);
}  // namespace instrumented

namespace {
// A plain kernel (this file is not instrumented): its stores are invisible to the backend. It
// calls an instrumented helper that stores to shared memory too, then reads what its own plain
// stores wrote with ldmatrix. That is not a read of memory "nothing has written": only a launch
// from an instrumented file sees every store (common/launch.h), so only there may the backend
// track them.
__global__ void plain_kernel_instrumented_helper(uint32_t* out) {
  uint32_t* s = attn::shared_memory<uint32_t>();
  for (int i = threadIdx.x; i < 32; i += 32) s[i] = i;
  instrumented::touch_shared(40);
  __syncthreads();
  uint32_t r[1];
  attn::ldmatrix<1>(r, s + 4 * (threadIdx.x % 8));
  out[threadIdx.x] = r[0];
}
}  // namespace

TEST_CASE("instrumented: ldmatrix of the warp's own stores needs a __syncwarp before it",
          "[instrumented]") {
  attn_test::DeviceBuf<uint32_t> out(32, "out");
  instrumented::run_restore_then_ldmatrix(out.ptr, 1);
  for (uint32_t l = 0; l < 32; ++l) CHECK(out.ptr[l] == l + 100);
  // The second store of each word, then ldmatrix with no __syncwarp between: every lane's read
  // depends on stores of other lanes that nothing ordered before it.
  CHECK_THROWS_WITH(instrumented::run_restore_then_ldmatrix(out.ptr, 0),
                    Catch::Contains("ldmatrix at tests/instrumented_kernels.cpp:") &&
                        Catch::Contains("of the same warp stored with no __syncwarp"));
}

TEST_CASE("instrumented: a barrier that leaves a warp out orders none of its stores",
          "[instrumented]") {
  // After __syncthreads no store is pending anywhere, and a read needs no look at who stored what
  // (Block::chunks); warp 0's later stores are pending again, and warp 1's named barrier, which
  // completes before warp 0 reads them, does not change that.
  attn_test::DeviceBuf<float> out(32, "out");
  instrumented::run_restore_after_barrier(out.ptr, 1);
  for (int l = 0; l < 32; ++l) CHECK(out.ptr[l] == float((l == 31 ? 31 : l + 1) + 100));
  CHECK_THROWS_WITH(instrumented::run_restore_after_barrier(out.ptr, 0),
                    Catch::Contains("block (0,0,0) thread (0,0,0)") &&
                        Catch::Contains("(offset 16) that lane 1 of the same warp stored with no "
                                        "__syncwarp, barrier or fence since") &&
                        Catch::Contains("at tests/instrumented_kernels.cpp:"));
}

TEST_CASE("instrumented: a plain kernel's stores are not taken for unwritten memory",
          "[instrumented]") {
  attn_test::DeviceBuf<uint32_t> out(32, "out");
  attn::launch(plain_kernel_instrumented_helper, {dim3(1), dim3(32), 64 * sizeof(float)}, out.ptr);
  // Lane l holds row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1: word 4 (l / 4) + l % 4 = l.
  for (uint32_t l = 0; l < 32; ++l) CHECK(out.ptr[l] == l);
}

TEST_CASE("instrumented: a shared-memory read one past the end is reported", "[instrumented]") {
  attn_test::DeviceBuf<float> out(1, "out");
  instrumented::run_shared_access(out.ptr, 64, 63);
  CHECK(out.ptr[0] == 63.0f);
  CHECK_THROWS_WITH(instrumented::run_shared_access(out.ptr, 64, 64),
                    Catch::Contains("block (0,0,0) thread (0,0,0)") &&
                        Catch::Contains("out-of-bounds shared-memory read of 4 bytes at offset 256 "
                                        "of the block's 256 bytes of dynamic shared memory") &&
                        Catch::Contains("at tests/instrumented_kernels.cpp:"));
}

TEST_CASE("instrumented: a shared-memory read that ends past a size of whole words is reported",
          "[instrumented]") {
  // 98 bytes: the last 16-byte chunk is partly outside the allocation, and written.
  attn_test::DeviceBuf<float> out(1, "out");
  instrumented::run_shared_tail_read(out.ptr, 92);
  CHECK(out.ptr[0] == 46.0f);
  CHECK_THROWS_WITH(instrumented::run_shared_tail_read(out.ptr, 96),
                    Catch::Contains("out-of-bounds shared-memory read of 4 bytes at offset 96 "
                                    "of the block's 98 bytes of dynamic shared memory"));
}

TEST_CASE("instrumented: a global read before its buffer is reported", "[instrumented]") {
  attn_test::DeviceBuf<float> in(32, "in"), out(32, "out");
  for (int i = 0; i < 32; ++i) in.ptr[i] = float(i);
  instrumented::run_global_read(in.ptr, out.ptr, 32, 0);
  CHECK(out.ptr[31] == 31.0f);
  CHECK_THROWS_WITH(instrumented::run_global_read(in.ptr, out.ptr, 32, -1),
                    Catch::Contains("thread (0,0,0)") &&
                        Catch::Contains("out-of-bounds read: 4-byte access at byte -4 of buffer "
                                        "'in' (128 bytes): 4 bytes before its start") &&
                        Catch::Contains("at tests/instrumented_kernels.cpp:"));
}

TEST_CASE(
    "instrumented: what the checks knew of memory outside every buffer ends with a new buffer",
    "[instrumented]") {
  // The checks pass an access inline when it falls in the gap between buffers that a lookup of
  // this OS thread found last (simt::in_device_gap); an allocation or a free makes a new snapshot
  // of the buffers, and the gap must be looked up again: a new buffer may lie in it.
  attn_test::DeviceBuf<float> a(32, "a");
  std::vector<float> host(64);
  const auto at = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  CHECK(simt::device_access_ok(host.data(), 4));  // outside every buffer: its gap is remembered
  CHECK(simt::in_device_gap(at(host.data()), 4));
  attn_test::DeviceBuf<float> b(32, "b");
  CHECK_FALSE(simt::in_device_gap(at(host.data()), 4));
  CHECK_FALSE(simt::device_access_ok(b.ptr - 1, 4));  // b's guard zone, wherever b landed
  CHECK(simt::device_access_ok(host.data(), 4));
  CHECK(simt::in_device_gap(at(host.data()), 4));
}

TEST_CASE("instrumented: what the checks knew of a buffer's bounds ends with its free",
          "[instrumented]") {
  // The checks pass an access inline when it lies inside a buffer that a lookup of this OS thread
  // found last (simt::in_recent_device_data): never one that reaches past its ends, and not after
  // a free, which may leave the memory to a buffer of another size.
  auto a = std::make_unique<attn_test::DeviceBuf<float>>(32, "a");
  const auto at = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  CHECK(simt::device_access_ok(a->ptr + 8, 4));  // inside a: its data is remembered
  CHECK(simt::in_recent_device_data(at(a->ptr), 32 * 4));
  CHECK_FALSE(simt::in_recent_device_data(at(a->ptr) - 4, 4));
  CHECK_FALSE(simt::in_recent_device_data(at(a->ptr + 31), 8));
  CHECK_FALSE(simt::device_access_ok(a->ptr + 31, 8));
  const uintptr_t was = at(a->ptr);
  a.reset();
  CHECK_FALSE(simt::in_recent_device_data(was, 4));
}

TEST_CASE("instrumented: atomics work", "[instrumented]") {
  attn_test::DeviceBuf<int> counter(1, "counter");
  attn_test::DeviceBuf<unsigned> bits(1, "bits");
  counter.ptr[0] = 0;
  bits.ptr[0] = 0;
  instrumented::run_count(counter.ptr, bits.ptr, 96);
  CHECK(counter.ptr[0] == 192);
  CHECK(bits.ptr[0] == 95u);
}

TEST_CASE("instrumented: a shared-memory read of what nothing wrote is reported",
          "[instrumented]") {
  attn_test::DeviceBuf<float> out(64, "out");
  instrumented::run_unwritten_read(out.ptr, 0);
  CHECK(out.ptr[0] == 63.0f);
  // A plain load, and an ldmatrix, of words no thread stored since the block started.
  CHECK_THROWS_WITH(instrumented::run_unwritten_read(out.ptr, 1),
                    Catch::Contains("read of shared memory (offset 256) that nothing has written "
                                    "since the block started") &&
                        Catch::Contains("at tests/instrumented_kernels.cpp:"));
  CHECK_THROWS_WITH(instrumented::run_unwritten_read(out.ptr, 2),
                    Catch::Contains("ldmatrix at tests/instrumented_kernels.cpp:") &&
                        Catch::Contains("which nothing has written since the block started"));
}

TEST_CASE(
    "instrumented: a plain read of shared memory that a cp.async still copies into is reported",
    "[instrumented]") {
  attn_test::DeviceBuf<float> in(4, "in"), out(1, "out");
  for (int i = 0; i < 4; ++i) in.ptr[i] = float(i + 7);
  instrumented::run_refill_then_read(in.ptr, out.ptr, 1);
  CHECK(out.ptr[0] == 7.0f);
  CHECK_THROWS_WITH(instrumented::run_refill_then_read(in.ptr, out.ptr, 0),
                    Catch::Contains("read of shared memory (offset 0) while the cp.async that "
                                    "thread 0 issued into it at tests/instrumented_kernels.cpp:") &&
                        Catch::Contains("has not landed"));
}
