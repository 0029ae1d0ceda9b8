// Every kernel step over the test matrix (tests/matrix.h), on the CPU SIMT backend under two
// fiber schedules, and on the GPU when one is present.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include "common/check.h"
#include "common/reference.h"
#include "common/simt/launch.h"
#include "common/simt/memory.h"
#include "common/simt/ptx.h"
#include "common/simt/sm90.h"
#include "common/tensors.h"
#include "tests/boundary.h"
#include "tests/matrix.h"
#include "tests/scoped_env.h"
#include "tests/source_line.h"
#include "tests/steps.h"

namespace {

// variant: a kernel variant to force (--variant); config: a tile configuration to force
// (--config), whose head dims then limit the matrix; rung: a rung of the step's ladder (--rung).
// The backward (step 6) leaves out the matrix's 1000-key problems unless ATTN_MATRIX=full: they
// exist to take a K/V ring round twice and give a kernel three query blocks, and step 6's kernels
// have no ring and tiles of at most 64 rows and 64 keys, which the shorter problems cover
// ("the shorter problems reach step 6's tiles" below); they are three quarters of its matrix's
// time.
void run_matrix(const attn::StepInfo& step, const std::string& backend, const std::string& schedule,
                const std::string& variant = "", const std::string& config = "",
                const std::string& rung = "") {
  std::vector<int> dims = step.head_dims;
  for (const auto& c : step.configs)
    if (c.name == config) dims = c.head_dims;
  for (const attn::Problem& p : attn_test::matrix()) {
    if (!dims.empty() && std::find(dims.begin(), dims.end(), p.dim) == dims.end()) continue;
    if (step.backward && !attn_test::full_matrix() && p.seqlen_k >= 1000) continue;
    attn::Options o;
    o.config = config;
    o.problem = p;
    o.iters = 0;  // the checked run alone
    o.warmup = 0;
    o.backend = backend;
    o.schedule = schedule;
    o.variant = variant;
    o.rung = rung;
    const attn::RunOutcome r = attn::run_step(step, o);
    INFO(r.row.step << " [" << backend << ", " << schedule << "] " << p.describe() << "\n"
                    << r.message << "\n"
                    << r.row.check.first_failure);
    REQUIRE(r.exit_code == 0);
    REQUIRE(r.row.checked);
    REQUIRE(r.row.check.passed);
    REQUIRE(r.row.backend == backend);
    REQUIRE(
        r.row.config ==
        (config.empty() && !step.configs.empty() && rung.empty() ? step.configs[0].name : config));
    if (!rung.empty()) REQUIRE(r.row.step == step.name + "[" + rung + "]");
  }
}

// Every step with kernels: the forward's, then the backward's.
const std::vector<attn::StepInfo>& all_kernel_steps() {
  static const std::vector<attn::StepInfo> steps = [] {
    std::vector<attn::StepInfo> all = attn_test::kernel_steps();
    for (attn::StepInfo& s : attn::backward_steps()) all.push_back(std::move(s));
    return all;
  }();
  return steps;
}

const attn::StepInfo& step_named(const std::string& name) {
  for (const auto& s : all_kernel_steps())
    if (s.name == name) return s;
  throw std::runtime_error("no step " + name);
}

}  // namespace

#define STEP_MATRIX_TESTS(NAME)                                                             \
  TEST_CASE(NAME " passes the matrix on the CPU backend, forward schedule", "[" NAME "]") { \
    run_matrix(step_named(NAME), "cpu", "forward");                                         \
  }                                                                                         \
  TEST_CASE(NAME " passes the matrix on the CPU backend, random schedule", "[" NAME "]") {  \
    run_matrix(step_named(NAME), "cpu", "random:7");                                        \
  }                                                                                         \
  TEST_CASE(NAME " passes the matrix on the CPU backend, reverse schedule", "[" NAME "]") { \
    run_matrix(step_named(NAME), "cpu", "reverse");                                         \
  }                                                                                         \
  TEST_CASE(NAME " passes the matrix on the CPU backend, greedy schedule", "[" NAME "]") {  \
    run_matrix(step_named(NAME), "cpu", "greedy");                                          \
  }                                                                                         \
  TEST_CASE(NAME " passes the matrix on the GPU", "[gpu][" NAME "]") {                      \
    run_matrix(step_named(NAME), "gpu", "forward");                                         \
  }

STEP_MATRIX_TESTS("step1_naive")
STEP_MATRIX_TESTS("step2_tiled")
STEP_MATRIX_TESTS("step3_fused")
STEP_MATRIX_TESTS("step4_tensorcore")
// The backward: dQ, dK and dV against the FP64 gradients (check_gradients), on the same matrix.
STEP_MATRIX_TESTS("step6_backward")

// A step with kernel variants runs the matrix for each of them, named explicitly, under every
// schedule (a producer/consumer kernel is where the order of the warps matters most).
#define STEP_VARIANT_MATRIX_TESTS(NAME, VARIANT)                                        \
  TEST_CASE(NAME " " VARIANT " passes the matrix on the CPU backend, forward schedule", \
            "[" NAME "]") {                                                             \
    run_matrix(step_named(NAME), "cpu", "forward", VARIANT);                            \
  }                                                                                     \
  TEST_CASE(NAME " " VARIANT " passes the matrix on the CPU backend, reverse schedule", \
            "[" NAME "]") {                                                             \
    run_matrix(step_named(NAME), "cpu", "reverse", VARIANT);                            \
  }                                                                                     \
  TEST_CASE(NAME " " VARIANT " passes the matrix on the CPU backend, random schedule",  \
            "[" NAME "]") {                                                             \
    run_matrix(step_named(NAME), "cpu", "random:7", VARIANT);                           \
  }                                                                                     \
  TEST_CASE(NAME " " VARIANT " passes the matrix on the CPU backend, greedy schedule",  \
            "[" NAME "]") {                                                             \
    run_matrix(step_named(NAME), "cpu", "greedy", VARIANT);                             \
  }                                                                                     \
  TEST_CASE(NAME " " VARIANT " passes the matrix on the GPU", "[gpu][" NAME "]") {      \
    run_matrix(step_named(NAME), "gpu", "forward", VARIANT);                            \
  }

STEP_VARIANT_MATRIX_TESTS("step5_warpspecialized", "sm80")
STEP_VARIANT_MATRIX_TESTS("step5_warpspecialized", "sm90a")
// Step 6's default on the CPU backend is its sm80 kernel (STEP_MATRIX_TESTS above).
STEP_VARIANT_MATRIX_TESTS("step6_backward", "sm90a")

// The sm90a kernel once more with more SMs than the tests' 3, where the matrix's problems leave
// SMs idle and the kernel splits their keys across blocks (rung 5.10; "step 5 splits ..." below
// holds the rule): on 132 (an H100's count) 8 of them split, each part 0 or 1 key tile; on 16, 7
// split, 3 of them (causal, GQA, dropout, per-batch key lengths) in parts of several key tiles.
// Two schedules each: the split runs under all four.
#define STEP5_SPLIT_MATRIX_TEST(SMS, SCHEDULE)                                                    \
  TEST_CASE("step5_warpspecialized sm90a passes the matrix on " SMS " SMs, keys split, " SCHEDULE \
            " schedule",                                                                          \
            "[step5_warpspecialized]") {                                                          \
    const attn_test::ScopedEnv sms("SIMT_SMS", SMS);                                              \
    run_matrix(step_named("step5_warpspecialized"), "cpu", SCHEDULE, "sm90a");                    \
  }
STEP5_SPLIT_MATRIX_TEST("132", "forward")
STEP5_SPLIT_MATRIX_TEST("132", "random:7")
STEP5_SPLIT_MATRIX_TEST("16", "reverse")
STEP5_SPLIT_MATRIX_TEST("16", "greedy")

// Every rung of a step's ladder but the last (which is the step itself, above) runs the matrix,
// named explicitly, under every schedule.
#define STEP_RUNG_MATRIX_TESTS(NAME, RUNG)                                                \
  TEST_CASE(NAME " rung " RUNG " passes the matrix on the CPU backend, forward schedule", \
            "[" NAME "][rungs]") {                                                        \
    run_matrix(step_named(NAME), "cpu", "forward", "", "", RUNG);                         \
  }                                                                                       \
  TEST_CASE(NAME " rung " RUNG " passes the matrix on the CPU backend, reverse schedule", \
            "[" NAME "][rungs]") {                                                        \
    run_matrix(step_named(NAME), "cpu", "reverse", "", "", RUNG);                         \
  }                                                                                       \
  TEST_CASE(NAME " rung " RUNG " passes the matrix on the CPU backend, random schedule",  \
            "[" NAME "][rungs]") {                                                        \
    run_matrix(step_named(NAME), "cpu", "random:7", "", "", RUNG);                        \
  }                                                                                       \
  TEST_CASE(NAME " rung " RUNG " passes the matrix on the CPU backend, greedy schedule",  \
            "[" NAME "][rungs]") {                                                        \
    run_matrix(step_named(NAME), "cpu", "greedy", "", "", RUNG);                          \
  }                                                                                       \
  TEST_CASE(NAME " rung " RUNG " passes the matrix on the GPU", "[gpu][" NAME "]") {      \
    run_matrix(step_named(NAME), "gpu", "forward", "", "", RUNG);                         \
  }

STEP_RUNG_MATRIX_TESTS("step6_backward", "math")
STEP_RUNG_MATRIX_TESTS("step6_backward", "atomics")
STEP_RUNG_MATRIX_TESTS("step6_backward", "tiles")
STEP_RUNG_MATRIX_TESTS("step6_backward", "fused")
STEP_RUNG_MATRIX_TESTS("step6_backward", "mma")
STEP_RUNG_MATRIX_TESTS("step6_backward", "registers")
STEP_RUNG_MATRIX_TESTS("step6_backward", "dq")
STEP_RUNG_MATRIX_TESTS("step6_backward", "deterministic")
STEP_RUNG_MATRIX_TESTS("step6_backward", "pipeline")
STEP_RUNG_MATRIX_TESTS("step6_backward", "elementwise")
STEP_RUNG_MATRIX_TESTS("step2_tiled", "tiles")
STEP_RUNG_MATRIX_TESTS("step2_tiled", "warps")
STEP_RUNG_MATRIX_TESTS("step4_tensorcore", "mma")
STEP_RUNG_MATRIX_TESTS("step4_tensorcore", "pv")
STEP_RUNG_MATRIX_TESTS("step4_tensorcore", "registers")
STEP_RUNG_MATRIX_TESTS("step4_tensorcore", "swizzle")
STEP_RUNG_MATRIX_TESTS("step4_tensorcore", "pipeline")
STEP_RUNG_MATRIX_TESTS("step4_tensorcore", "exp2")
STEP_RUNG_MATRIX_TESTS("step4_tensorcore", "unmasked")
STEP_RUNG_MATRIX_TESTS("step4_tensorcore", "immediates")
STEP_RUNG_MATRIX_TESTS("step4_tensorcore", "copies")
STEP_RUNG_MATRIX_TESTS("step4_tensorcore", "keepbits")
STEP_RUNG_MATRIX_TESTS("step5_warpspecialized", "tma")
STEP_RUNG_MATRIX_TESTS("step5_warpspecialized", "wgmma")
STEP_RUNG_MATRIX_TESTS("step5_warpspecialized", "warpgroups")
STEP_RUNG_MATRIX_TESTS("step5_warpspecialized", "pingpong")
STEP_RUNG_MATRIX_TESTS("step5_warpspecialized", "overlap")
STEP_RUNG_MATRIX_TESTS("step5_warpspecialized", "budget")
STEP_RUNG_MATRIX_TESTS("step5_warpspecialized", "persistent")
STEP_RUNG_MATRIX_TESTS("step5_warpspecialized", "lpt")
STEP_RUNG_MATRIX_TESTS("step5_warpspecialized", "shapes")
STEP_RUNG_MATRIX_TESTS("step5_warpspecialized", "split")

TEST_CASE("every rung of a ladder has a test of its own here", "[steps][rungs]") {
  // The list above, against the steps' ladders: a new rung needs its STEP_RUNG_MATRIX_TESTS line.
  // A variant's own kernel on the way (step 6's sm80 kernel) has the step's tests instead.
  std::ifstream self(ATTN_SOURCE_DIR "/tests/test_steps.cpp");
  const std::string text((std::istreambuf_iterator<char>(self)), {});
  for (const attn::StepInfo& step : all_kernel_steps())
    for (size_t i = 0; i + 1 < step.rungs.size(); ++i) {
      if (step.rungs[i].cpu == step.cpu) continue;
      INFO(step.name << " rung " << step.rungs[i].name);
      CHECK(text.find("STEP_RUNG_MATRIX_TESTS(\"" + step.name + "\", \"" + step.rungs[i].name +
                      "\")") != std::string::npos);
    }
}

TEST_CASE("a rung runs by name or number; unknown rungs and configs are refused",
          "[steps][rungs]") {
  const attn::StepInfo& step = step_named("step4_tensorcore");
  attn::Options o;
  o.problem = attn_test::make(1, 1, 1, 17, 17, 64, attn::DType::fp16, true);
  o.iters = 0;  // the checked run alone
  o.warmup = 0;
  o.backend = "cpu";
  o.rung = "2";
  attn::RunOutcome r = attn::run_step(step, o);
  CHECK(r.exit_code == 0);
  CHECK(r.row.step == "step4_tensorcore[registers]");
  o.rung = step.rungs.back().name;  // the last rung is the step itself, configurations and all
  r = attn::run_step(step, o);
  CHECK(r.exit_code == 0);
  CHECK(r.row.step == "step4_tensorcore");
  CHECK(r.row.config == step.configs[0].name);
  o.rung = "nope";
  r = attn::run_step(step, o);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::Contains("--rung nope") && Catch::Contains("1 mma"));
  o.rung = "mma";
  o.config = step.configs[0].name;
  r = attn::run_step(step, o);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::Contains("rung mma has one tile configuration"));
  o.config = "";
  r = attn::run_step(step_named("step3_fused"), o);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::Contains("this step is a single kernel"));
  // Step 5's ladder leads to its sm90a kernel: a rung runs that variant, and no other.
  const attn::StepInfo& step5 = step_named("step5_warpspecialized");
  o.rung = "wgmma";
  r = attn::run_step(step5, o);
  CHECK(r.exit_code == 0);
  CHECK(r.row.step == "step5_warpspecialized[wgmma]");
  o.rung = step5.rungs.back().name;
  r = attn::run_step(step5, o);
  CHECK(r.exit_code == 0);
  CHECK(r.row.step == "step5_warpspecialized[sm90a]");
  o.variant = "sm80";
  r = attn::run_step(step5, o);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::Contains("a rung of the sm90a variant, not of --variant sm80"));
}

// ---- Tile boundaries: rows that end at k Bc - 1, k Bc and k Bc + 1 (tests/boundary.h)
// -------------

namespace {

// Every tiled kernel (each step4 configuration and step5 variant) on the boundary shapes of the
// tile it reports, for head dims 64 and 128 (step5 sm90a's tile width depends on both, and on
// dropout), with and without dropout. Each of the four runs under one of two schedules, so that
// every kernel, head dim and dropout setting meets both ("forward" and "random:13") in half the
// runs: the shapes are about where rows and tiles end, which no schedule changes; the matrix runs
// every kernel under all four schedules. A rung of a ladder takes one of the four in turn along
// its ladder (as step 6's rungs do): each carries the ideas of the rungs before it into the
// step's own kernels, which take all four, and the matrix holds every rung to every head dim and
// dropout setting.
void run_boundaries(const std::string& step_name, const std::string& variant,
                    const std::string& config, const std::string& rung = "") {
  const attn::StepInfo step = attn_test::as_rung(step_named(step_name), rung);
  const auto& rungs = step_named(step_name).rungs;
  const long turn =
      rung.empty() ? -1 : std::find_if(rungs.begin(), rungs.end(), [&](const auto& r) {
                            return r.name == rung;
                          }) - rungs.begin();
  int run = 0;
  for (int dim : {64, 128})
    for (float dropout : {0.0f, 0.1f}) {
      if (turn >= 0 && run++ % 4 != turn % 4) continue;
      const char* schedule = (dim == 64) == (dropout == 0.0f) ? "forward" : "random:13";
      const attn::RunContext::Tile tile = attn_test::tile_of(step, variant, config, dim, dropout);
      REQUIRE(tile.rows > 0);
      REQUIRE(tile.keys > 0);
      for (const attn::Problem& p : attn_test::boundary_problems(tile, dim, dropout)) {
        INFO(step.name << " " << variant << config << " [" << schedule << "] Br " << tile.rows
                       << " Bc " << tile.keys << ": " << p.describe());
        CHECK(attn_test::run_boundary(step, variant, config, p, tile.keys, schedule) == "");
      }
    }
}

// Calls fn(step, variant, config, rung) for every tiled kernel of the steps named in `steps`
// (all when empty): steps 2 and 3, each step4 configuration, the rungs of steps 2 and 4, both
// step5 variants and step5's rungs.
void each_tiled_kernel(const std::function<void(const std::string&, const std::string&,
                                                const std::string&, const std::string&)>& fn,
                       const std::vector<std::string>& steps = {}) {
  const auto wanted = [&](const std::string& step) {
    return steps.empty() || std::find(steps.begin(), steps.end(), step) != steps.end();
  };
  const auto each = [&](const std::string& step, const std::string& variant,
                        const std::string& config, const std::string& rung) {
    if (wanted(step)) fn(step, variant, config, rung);
  };
  for (const char* step : {"step2_tiled", "step3_fused"}) each(step, "", "", "");
  for (const auto& c : step_named("step4_tensorcore").configs)
    each("step4_tensorcore", "", c.name, "");
  for (const char* laddered : {"step2_tiled", "step4_tensorcore"})
    for (const auto& r : step_named(laddered).rungs) each(laddered, "", "", r.name);
  for (const char* variant : {"sm80", "sm90a"}) each("step5_warpspecialized", variant, "", "");
  const auto& step5_rungs = step_named("step5_warpspecialized").rungs;  // the last is sm90a
  for (size_t i = 0; i + 1 < step5_rungs.size(); ++i)
    each("step5_warpspecialized", "", "", step5_rungs[i].name);
}

// The most query blocks and key tiles of one block that the test matrix gives a kernel of this
// tile, over the matrix's problems of head dim `dim` and with (or without) dropout.
std::pair<int, int> matrix_reach(const attn::RunContext::Tile& tile, int dim, bool dropout) {
  int blocks = 0, tiles = 0;
  for (const attn::Problem& p : attn_test::matrix()) {
    if (p.dim != dim || (p.dropout > 0) != dropout) continue;
    for (int b = 0; b < p.batch; ++b) {
      const int rows = p.seqlens_q.empty() ? p.seqlen_q : p.seqlens_q[size_t(b)];
      const int keys = p.seqlens_k.empty() ? p.seqlen_k : p.seqlens_k[size_t(b)];
      if (rows == 0) continue;
      // The last row sees every key (bottom-right causal alignment): its block reads them all.
      blocks = std::max(blocks, (rows + tile.rows - 1) / tile.rows);
      tiles = std::max(tiles, (keys + tile.keys - 1) / tile.keys);
    }
  }
  return {blocks, tiles};
}

}  // namespace

// One test per step, so that CTest runs them side by side.
TEST_CASE("tiled kernels pass rows that end at a tile boundary: steps 2 and 3",
          "[steps][boundary]") {
  each_tiled_kernel(run_boundaries, {"step2_tiled", "step3_fused"});
}

TEST_CASE("tiled kernels pass rows that end at a tile boundary: step 4", "[steps][boundary]") {
  each_tiled_kernel(run_boundaries, {"step4_tensorcore"});
}

TEST_CASE("tiled kernels pass rows that end at a tile boundary: step 5", "[steps][boundary]") {
  each_tiled_kernel(run_boundaries, {"step5_warpspecialized"});
}

// On 132 SMs the sm90a kernel splits the boundary shapes' keys: the causal problem's (19 or 20
// batches of 3 query tiles, up to 4 key tiles, 5 with dropout) into two parts, the second of
// several tiles where there are three or more; the other's (6 batches of 2 query tiles, up to 3
// key tiles) into parts of one, whose first lies on either side of the first row's last unmasked
// tile.
TEST_CASE("tiled kernels pass rows that end at a tile boundary: step 5, keys split",
          "[steps][boundary]") {
  const attn_test::ScopedEnv sms("SIMT_SMS", "132");
  run_boundaries("step5_warpspecialized", "sm90a", "");
}

namespace {
// The tile step 5's sm90a kernel ran problem p with (its parts: splits), the CPU backend
// presenting `sms` SMs.
attn::RunContext::Tile sm90a_tile(const attn::Problem& p, const char* sms) {
  const attn_test::ScopedEnv env("SIMT_SMS", sms);
  auto be = attn::make_cpu_backend();
  const attn::DeviceProblem dev(*be, p, attn::make_inputs(p));
  attn::RunContext ctx(*be);
  ctx.variant = "sm90a";
  step_named("step5_warpspecialized").cpu(dev.params(), ctx);
  return ctx.tile;
}
}  // namespace

// Rung 5.10's rule (key_splits in attention_sm90a.cu): a query tile's keys are split into as many
// parts as keep the grid to one block per SM, and no more than the key tiles: only when the query
// tiles fill at most half the SMs.
TEST_CASE("step 5 splits a query tile's keys only when the query tiles fill at most half the SMs",
          "[steps]") {
  using attn::DType;
  // The seed's shape, causal to halve the CPU's work: 4 query tiles x 8 heads = 32 tiles, 3 key
  // tiles of 192 (64 with dropout: 8).
  const attn::Problem seed = attn_test::make(1, 8, 8, 512, 512, 64, DType::fp16, true);
  CHECK(sm90a_tile(seed, "132").splits == 3);  // 4 parts would fit; 3 key tiles
  CHECK(sm90a_tile(seed, "64").splits == 2);   // 64 blocks: 2 parts
  CHECK(sm90a_tile(seed, "63").splits == 1);   // 2 parts would be 64 blocks on 63 SMs
  CHECK(sm90a_tile(seed, "32").splits == 1);   // the tiles fill the SMs
  attn::Problem dropout = seed;
  dropout.dropout = 0.1f;
  CHECK(sm90a_tile(dropout, "132").splits == 4);  // 132 / 32 parts, of 8 key tiles
  // One query tile of 1000 keys at D = 128: 6 key tiles of 176.
  const attn::Problem one = attn_test::make(1, 1, 1, 100, 1000, 128, DType::bf16, false);
  CHECK(sm90a_tile(one, "132").splits == 6);
  CHECK(sm90a_tile(one, "4").splits == 4);
  CHECK(sm90a_tile(one, "1").splits == 1);
}

// Rung 5.11's rule (packed_heads in attention_sm90a.cu): the query heads of a GQA group share a
// tile when the group divides its 128 rows and that saves at least a tenth of the tiles.
TEST_CASE("step 5 packs a GQA group's query heads into a tile when that saves a tenth of the tiles",
          "[steps]") {
  using attn::DType;
  const auto heads = [](int h, int h_kv, int sq) {
    return sm90a_tile(attn_test::make(1, h, h_kv, sq, 17, 64, DType::bf16, false), "3").heads;
  };
  CHECK(heads(8, 1, 1) == 8);    // 1 tile of 8 heads x 16 rows instead of 8
  CHECK(heads(8, 1, 17) == 8);   // 2 instead of 8
  CHECK(heads(8, 2, 48) == 4);   // 2 of 4 x 32 rows instead of 4, for each K/V head
  CHECK(heads(2, 1, 129) == 2);  // 3 of 2 x 64 instead of 4
  CHECK(heads(2, 1, 300) == 2);  // 5 instead of 6
  CHECK(heads(2, 1, 128) == 1);  // 2 either way
  CHECK(heads(2, 1, 700) == 1);  // 11 instead of 12: not a tenth
  CHECK(heads(2, 2, 1) == 1);    // no group
  CHECK(heads(3, 1, 1) == 1);    // 3 does not divide 128
}

// The matrix's packed problems have groups of 2 (a warpgroup's 64 rows one head's); these pack 4,
// 8 and 16 heads (a warpgroup's rows several heads', a lane's two rows two heads' at 16), with
// per-batch lengths, causal masks and dropout, on 3 SMs and on 132 (where the keys are split too).
TEST_CASE("step 5's packed tiles pass GQA groups of 4, 8 and 16", "[steps]") {
  using attn::DType;
  const attn::StepInfo& step = step_named("step5_warpspecialized");
  const std::pair<attn::Problem, int> packed[] = {
      {attn_test::make(1, 16, 1, 1, 17, 80, DType::bf16, true), 16},
      {attn_test::make(3, 8, 2, 33, 129, 64, DType::bf16, false, {129, 0, 50}), 4},
      {attn_test::with_seqlens_q(
           attn_test::make(3, 8, 1, 65, 100, 64, DType::fp16, true, {100, 30, 0}), {65, 10, 40}),
       8},
      {attn_test::make(1, 8, 1, 20, 300, 128, DType::bf16, true, {}, 0.1f), 8},
  };
  for (const auto& [p, pack] : packed)
    for (const auto& [sms, schedule] : {std::pair{"3", "forward"}, std::pair{"132", "random:7"}}) {
      INFO(p.describe() << " on " << sms << " SMs, " << schedule);
      CHECK(sm90a_tile(p, sms).heads == pack);
      const attn_test::ScopedEnv env("SIMT_SMS", sms);
      CHECK(attn_test::run_boundary(step, "sm90a", "", p, 192, schedule) == "");
    }
}

// Step 6's tiled rungs on the boundary shapes of the tile each reports (its tallest query tile and
// its keys a block), checked as the backward is (dQ, dK, dV against the FP64 gradients): K = 1.5 on
// the keys next to a tile boundary makes a lost or leaked key move the gradients too. One head dim
// and dropout setting a rung, in turn, and one schedule: the FP64 backward of each shape is the
// cost here, and the matrix holds every rung to every head dim, dropout and schedule.
TEST_CASE("tiled kernels pass rows that end at a tile boundary: step 6", "[steps][boundary]") {
  const attn::StepInfo& step = step_named("step6_backward");
  int n = 0;
  for (const auto& rung : step.rungs) {
    const int dim = std::vector<int>{64, 80, 96, 128}[size_t(n % 4)];
    const float dropout = n % 2 ? 0.1f : 0.0f;
    const attn::RunContext::Tile tile =
        attn_test::tile_of(attn_test::as_rung(step, rung.name), rung.variant, "", dim, dropout);
    if (tile.rows == 0) continue;  // rungs 6.1 and 6.2: no tiles
    ++n;
    for (const attn::Problem& p : attn_test::boundary_problems(tile, dim, dropout)) {
      const attn::HostInputs in = attn_test::boundary_inputs(p, tile.keys);
      attn::Options o;
      o.problem = p;
      o.inputs = &in;
      o.iters = 0;
      o.warmup = 0;
      o.backend = "cpu";
      o.rung = rung.name;
      o.schedule = n % 2 ? "forward" : "random:13";
      const attn::RunOutcome r = attn::run_step(step, o);
      INFO(rung.name << " Br " << tile.rows << " Bc " << tile.keys << ": " << p.describe() << "\n"
                     << r.message << r.row.check.first_failure);
      CHECK(r.exit_code == 0);
      CHECK(r.row.check.passed);
    }
  }
  CHECK(n >= 6);  // every tiled rung ran
}

TEST_CASE("the matrix wraps every kernel's K/V stages twice and gives it three query blocks",
          "[steps]") {
  // What the matrix's long problems are for: some problem gives each kernel a block whose key
  // tiles go round its stages at least twice (each stage reused, its mbarrier phases back where
  // they began), and some problem (not necessarily the same one) a grid of at least three query
  // blocks (one neither first nor last), at a tile the kernel reports for one of its head dims,
  // with or without dropout.
  each_tiled_kernel([](const std::string& step_name, const std::string& variant,
                       const std::string& config, const std::string& rung) {
    const attn::StepInfo step = attn_test::as_rung(step_named(step_name), rung);
    std::vector<int> dims =
        step.head_dims.empty() ? std::vector<int>{64, 80, 96, 128} : step.head_dims;
    for (const auto& c : step.configs)
      if (c.name == config) dims = c.head_dims;
    int blocks = 0, laps = 0, stages = 0;
    for (int dim : dims)
      for (bool dropout : {false, true}) {
        const attn::RunContext::Tile tile =
            attn_test::tile_of(step, variant, config, dim, dropout ? 0.1f : 0.0f);
        REQUIRE(tile.stages >= 1);
        const auto [b, tiles] = matrix_reach(tile, dim, dropout);
        blocks = std::max(blocks, b);
        laps = std::max(laps, (tiles - 1) / tile.stages);  // times the first stage is reused
        stages = std::max(stages, tile.stages);
      }
    INFO(step.name << " " << variant << config << ": " << stages << " stages, the first reused "
                   << laps << " times, " << blocks << " query blocks");
    CHECK(blocks >= 3);
    CHECK(laps >= 2);
  });
}

// Rung 6.8's promise, which the rungs after it keep: dQ, dK and dV are the same bits
// under every schedule of the CPU backend (so from run to run on a GPU too). Rung 6.7, which adds
// dQ with atomicAdd, is the contrast: its dQ changes with the order in which the blocks reach an
// element, which the schedules vary.
TEST_CASE("step 6's gradients are the same bits under every schedule and rung dq's dQ is not",
          "[steps]") {
  const attn::StepInfo& step = step_named("step6_backward");
  attn::Problem p = attn_test::make(2, 4, 2, 129, 200, 64, attn::DType::fp16, true, {}, 0.1f);
  const auto grads = [&](const std::string& rung, const std::string& schedule) {
    attn::Options o;
    o.problem = p;
    o.iters = 0;
    o.warmup = 0;
    o.backend = "cpu";
    o.schedule = schedule;
    o.rung = rung;
    o.keep_outputs = true;
    const attn::RunOutcome r = attn::run_step(step, o);
    INFO(rung << " [" << schedule << "]: " << r.message << r.row.check.first_failure);
    REQUIRE(r.exit_code == 0);
    return r.grads;
  };
  const std::vector<std::string> schedules = {"reverse", "greedy", "random:3", "random:11"};
  const attn::Gradients first = grads("", "forward");
  REQUIRE(!first.dq.empty());
  for (const std::string& schedule : schedules) {
    const attn::Gradients g = grads("", schedule);
    INFO(schedule);
    CHECK(g.dq == first.dq);
    CHECK(g.dk == first.dk);
    CHECK(g.dv == first.dv);
  }
  // The pipeline (rung 6.9) changed how tiles arrive, not what is computed: rung 6.8's bits.
  const attn::Gradients pipelined = grads("pipeline", "forward");
  const attn::Gradients unpipelined = grads("deterministic", "forward");
  CHECK(unpipelined.dq == pipelined.dq);
  CHECK(unpipelined.dk == pipelined.dk);
  CHECK(unpipelined.dv == pipelined.dv);
  // Taller tiles (rung 6.11, the step's own) change where dkdv_kernel's rows come from, not the
  // arithmetic or its order: rung 6.10's bits, with dropout (above) and without (every version
  // of the pairs' loop: the unmasked one too).
  const attn::Gradients sliced = grads("elementwise", "forward");
  CHECK(sliced.dq == first.dq);
  CHECK(sliced.dk == first.dk);
  CHECK(sliced.dv == first.dv);
  p.dropout = 0.0f;
  const attn::Gradients own = grads("", "forward"), elementwise = grads("elementwise", "forward");
  CHECK(own.dq == elementwise.dq);
  CHECK(own.dk == elementwise.dk);
  CHECK(own.dv == elementwise.dv);
  // So does TMA (rung 6.12, the sm90a variant): the tiles arrive whole, computed on as before.
  const attn::Gradients tma = grads("tma", "greedy");
  CHECK(tma.dq == own.dq);
  CHECK(tma.dk == own.dk);
  CHECK(tma.dv == own.dv);
  p.dropout = 0.1f;
  const attn::Gradients tma_dropout = grads("tma", "reverse");
  CHECK(tma_dropout.dk == first.dk);
  CHECK(tma_dropout.dv == first.dv);
  const attn::Gradients atomics = grads("dq", "forward");
  int differ = 0;
  for (const std::string& schedule : schedules) differ += grads("dq", schedule).dq != atomics.dq;
  CHECK(differ > 0);
}

namespace {
// Step 6's problem for the caller's arrays in place: two batches, GQA, causal, the second with 33
// of 90 keys and 41 of 70 query rows; its inputs, dO and the forward's O and LSE (the FP64 one's),
// Q and dO with NaN in that batch's padding rows (past its query length), and K and V with NaN in
// its padding keys (past its key length). Or, not causal, the second with len_k of seqlen_k keys.
struct InPlaceBackward {
  attn::Options o;
  attn::HostInputs in;
  std::vector<attn::Bits16> dout, q_pad, dout_pad, k_pad, v_pad;
  attn::BackwardInputs given;
  InPlaceBackward(attn::DType dtype, float dropout, bool causal = true, int seqlen_k = 90,
                  int len_k = 33) {
    o.problem =
        attn_test::make(2, 4, 2, 70, seqlen_k, 64, dtype, causal, {seqlen_k, len_k}, dropout);
    o.problem.seqlens_q = {70, 41};
    const attn::Problem& p = o.problem;
    o.backend = "cpu";
    o.iters = 0;
    o.warmup = 0;
    in = attn::make_inputs(p);
    dout = attn::make_dout(p);
    given = attn::backward_inputs(
        p, dout, attn::reference_backward(p, attn::widen(p, in), attn::widen(dout, p.dtype)));
    q_pad = in.q, dout_pad = dout;
    for (int h = 0; h < p.heads; ++h)
      for (int i = 41; i < p.seqlen_q; ++i)
        for (int c = 0; c < p.dim; ++c) {
          const size_t x =
              (size_t(p.heads + h) * size_t(p.seqlen_q) + size_t(i)) * size_t(p.dim) + size_t(c);
          q_pad[x] = dout_pad[x] = attn::to_bits(NAN, p.dtype);
        }
    k_pad = in.k, v_pad = in.v;
    for (int h = 0; h < p.heads_kv; ++h)
      for (int j = len_k; j < p.seqlen_k; ++j)
        for (int c = 0; c < p.dim; ++c) {
          const size_t x =
              (size_t(p.heads_kv + h) * size_t(p.seqlen_k) + size_t(j)) * size_t(p.dim) + size_t(c);
          k_pad[x] = v_pad[x] = attn::to_bits(NAN, p.dtype);
        }
  }
};
}  // namespace

// The path a PyTorch CUDA tensor takes (Options::device_arrays), on the CPU backend, whose device
// memory is host memory: step 6 reads Q, K, V, O, LSE and dO and writes dQ, dK and dV where the
// caller holds them, the same bits as with the harness's own copies; unchecked it touches nothing
// else, checked it poisons the gradients first and compares them with the FP64 reference.
TEST_CASE("step 6 on the caller's arrays in place (the path CUDA arrays take), CPU backend",
          "[steps][in_place]") {
  const attn::StepInfo& step = step_named("step6_backward");
  InPlaceBackward t(attn::DType::bf16, 0.1f);
  attn::Options& o = t.o;
  const attn::Problem& p = o.problem;
  const attn::HostInputs& in = t.in;
  const std::vector<attn::Bits16>& dout = t.dout;
  attn::BackwardInputs& given = t.given;
  // The usual way: the harness's copies, the gradients kept.
  o.inputs = &in;
  o.backward_inputs = &given;
  o.keep_outputs = true;
  const attn::RunOutcome copied = attn::run_step(step, o);
  INFO(copied.message);
  REQUIRE(copied.exit_code == 0);
  // In place.
  std::vector<attn::Bits16> dq(p.q_elements()), dk(p.kv_elements()), dv(p.kv_elements());
  attn::Options::DeviceArrays arrays{in.q.data(), in.k.data(), in.v.data(), given.o.data(),
                                     given.lse.data()};
  arrays.dout = dout.data(), arrays.dq = dq.data(), arrays.dk = dk.data(), arrays.dv = dv.data();
  o.inputs = nullptr;
  o.backward_inputs = nullptr;
  o.keep_outputs = false;
  o.device_arrays = &arrays;
  const std::vector<attn::Bits16> o_before = given.o;
  for (const bool check : {false, true}) {
    o.check = check;
    std::fill(dq.begin(), dq.end(), attn::Bits16(0x1234));
    const attn::RunOutcome r = attn::run_step(step, o);
    INFO("check " << check << ": " << r.message << r.row.check.first_failure);
    REQUIRE(r.exit_code == 0);
    CHECK(r.row.checked == check);
    CHECK((check ? r.row.check.passed : true));
    CHECK(r.grads.dq.empty());  // nothing copied back
    CHECK(dq == copied.grads.dq);
    CHECK(dk == copied.grads.dk);
    CHECK(dv == copied.grads.dv);
    CHECK(given.o == o_before);  // the forward's O is read, never poisoned
  }
  // Unchecked, the values are not looked at: NaN in the rows past a batch's query length (its
  // padding, which nothing reads as a row) changes nothing.
  o.check = false;
  arrays.q = t.q_pad.data(), arrays.dout = t.dout_pad.data();
  REQUIRE(attn::run_step(step, o).exit_code == 0);
  CHECK(dq == copied.grads.dq);
  CHECK(dk == copied.grads.dk);
  CHECK(dv == copied.grads.dv);
  arrays.q = in.q.data();
  o.check = true;
  // NaN in the caller's dO is refused when checked, in one line.
  std::vector<attn::Bits16> bad = dout;
  bad[5] = attn::to_bits(NAN, p.dtype);
  arrays.dout = bad.data();
  const attn::RunOutcome r = attn::run_step(step, o);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::Contains("dout"));
  // A backward step without its gradients' arrays, or with device arrays and host inputs too, is a
  // programming error, not a user's.
  arrays.dout = dout.data();
  o.backward_inputs = &given;
  CHECK_THROWS_AS(attn::run_step(step, o), std::logic_error);
  o.backward_inputs = nullptr;
  arrays.dv = nullptr;
  CHECK_THROWS_AS(attn::run_step(step, o), std::logic_error);
}

// A batch's padding is the caller's memory, never read as a row or a key: NaN in Q past its query
// length and in K and V past its key length (a KV cache filled by torch.empty, say) changes no bit
// of any kernel's outputs, forward or backward. A key tile that runs past the batch's key length
// must load those rows as zeros: its masked scores make P = 0 there, but P V adds 0 * NaN = NaN;
// and a padding row that ran through unmasked tiles (the second problem: its block's first row
// sees 290 keys) must still write O = 0.
TEST_CASE("every kernel: NaN in a batch's padding queries and keys changes nothing",
          "[steps][in_place]") {
  InPlaceBackward t(attn::DType::fp16, 0.0f), wide(attn::DType::fp16, 0.0f, false, 300, 290);
  for (InPlaceBackward* u : {&t, &wide}) {
    const attn::Problem& q = u->o.problem;  // the forward's LSE too may be anything there
    std::vector<float> lse_pad = u->given.lse;
    for (int h = 0; h < q.heads; ++h)
      for (int i = q.seqlens_q[1]; i < q.seqlen_q; ++i)
        lse_pad[size_t(q.heads + h) * size_t(q.seqlen_q) + size_t(i)] = NAN;
    attn::Options& o = u->o;
    const attn::Problem& p = o.problem;
    for (const attn::StepInfo& step : all_kernel_steps()) {
      bool deterministic = false;  // step 6's dQ is the same bits from run to run (from this on)
      // Every kernel of the step: its rungs (the last is the step), variants and configurations.
      std::vector<std::array<std::string, 3>> kernels;  // rung, variant, config
      for (const auto& rung : step.rungs) kernels.push_back({rung.name, "", ""});
      for (const std::string& variant : step.variants) kernels.push_back({"", variant, ""});
      for (const auto& config : step.configs) kernels.push_back({"", "", config.name});
      if (kernels.empty()) kernels.push_back({"", "", ""});
      for (const auto& [rung, variant, config] : kernels) {
        o.rung = rung, o.variant = variant, o.config = config;
        o.check = false;
        o.inputs = &u->in;
        o.backward_inputs = step.backward ? &u->given : nullptr;
        o.keep_outputs = true;
        o.device_arrays = nullptr;
        const attn::RunOutcome copied = attn::run_step(step, o);
        INFO(step.name << " rung '" << rung << "' variant '" << variant << "' config '" << config
                       << "': " << copied.message);
        REQUIRE(copied.exit_code == 0);
        std::vector<attn::Bits16> out(p.q_elements()), dq(p.q_elements()), dk(p.kv_elements()),
            dv(p.kv_elements());
        std::vector<float> lse(size_t(p.lse_elements()));
        attn::Options::DeviceArrays arrays{u->q_pad.data(), u->k_pad.data(), u->v_pad.data(),
                                           step.backward ? u->given.o.data() : out.data(),
                                           step.backward ? lse_pad.data() : lse.data()};
        if (step.backward)
          arrays.dout = u->dout_pad.data(), arrays.dq = dq.data(), arrays.dk = dk.data(),
          arrays.dv = dv.data();
        o.inputs = nullptr;
        o.backward_inputs = nullptr;
        o.keep_outputs = false;
        o.device_arrays = &arrays;
        REQUIRE(attn::run_step(step, o).exit_code == 0);
        if (!step.backward) {
          CHECK(out == copied.o);
          CHECK(lse == copied.lse);
          continue;
        }
        CHECK(dk == copied.grads.dk);
        CHECK(dv == copied.grads.dv);
        deterministic = deterministic || rung == "deterministic" || rung.empty();
        if (deterministic)
          CHECK(dq == copied.grads.dq);
        else  // added up by atomics in the order the blocks run
          CHECK(std::all_of(dq.begin(), dq.end(), [&](attn::Bits16 v) {
            return std::isfinite(attn::from_bits(v, p.dtype));
          }));
      }
    }
  }
  attn::Options& o = t.o;
  const attn::Problem& p = o.problem;
  // Handed over as host arrays and checked, that padding is no NaN in the inputs either, nor an
  // Inf there a scale that overflows: accepted, and the results pass the FP64 check (NaN in a
  // batch's real rows stays refused, in one line).
  attn::HostInputs padded{t.q_pad, t.k_pad, t.v_pad};
  padded.k[(size_t(p.heads_kv) * size_t(p.seqlen_k) + 40) * size_t(p.dim)] =
      attn::to_bits(INFINITY, p.dtype);  // batch 1's key 40, of 33
  attn::BackwardInputs given = t.given;
  given.dout = t.dout_pad;
  for (int h = 0; h < p.heads; ++h)
    for (int i = 41; i < p.seqlen_q; ++i)
      given.lse[size_t(p.heads + h) * size_t(p.seqlen_q) + size_t(i)] = NAN;
  for (const char* name : {"step3_fused", "step6_backward"}) {
    const attn::StepInfo& step = step_named(name);
    o.rung = o.variant = o.config = "";
    o.check = true;
    o.inputs = &padded;
    o.backward_inputs = step.backward ? &given : nullptr;
    o.keep_outputs = false;
    o.device_arrays = nullptr;
    const attn::RunOutcome r = attn::run_step(step, o);
    INFO(name << ": " << r.message << r.row.check.first_failure);
    CHECK(r.exit_code == 0);
    CHECK(r.row.check.passed);
  }
  attn::HostInputs bad = padded;
  bad.k[(size_t(p.heads_kv) * size_t(p.seqlen_k) + 32) * size_t(p.dim)] =
      attn::to_bits(NAN, p.dtype);  // batch 1's last key
  o.inputs = &bad;
  o.backward_inputs = nullptr;
  const attn::RunOutcome r = attn::run_step(step_named("step3_fused"), o);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::Contains("tensor 'k' holds NaN or Inf"));
}

TEST_CASE("the shorter problems reach step 6's tiles", "[steps]") {
  // What run_matrix leaves out for the backward, its shorter problems reach: three query tiles
  // and three key tiles (a block neither first nor last) of each tiled kernel of the step, in some
  // problem of each head dim and in some problem with and without dropout. (Its tiles depend on
  // neither: the head dim changes the loops over d, dropout the factor Z.)
  const attn::StepInfo& step = step_named("step6_backward");
  for (const auto& rung : step.rungs) {
    std::map<std::string, std::pair<int, int>> reach;  // "D 64", "dropout" ...: rows, keys
    attn::RunContext::Tile tile;
    for (int dim : {64, 80, 96, 128})
      for (bool dropout : {false, true}) {
        tile = attn_test::tile_of(attn_test::as_rung(step, rung.name), "", "", dim,
                                  dropout ? 0.1f : 0.0f);
        if (tile.rows == 0) break;  // no tiles: rungs 6.1 and 6.2
        for (const attn::Problem& p : attn_test::matrix()) {
          if (p.dim != dim || (p.dropout > 0) != dropout || p.seqlen_k >= 1000) continue;
          for (const std::string& key :
               {"D " + std::to_string(dim), std::string(dropout ? "dropout" : "no dropout")}) {
            auto& [rows, keys] = reach[key];
            rows = std::max(rows, (p.seqlen_q + tile.rows - 1) / tile.rows);
            keys = std::max(keys, (p.seqlen_k + tile.keys - 1) / tile.keys);
          }
        }
      }
    if (tile.rows == 0) continue;
    CHECK(reach.size() == 6);
    for (const auto& [key, r] : reach) {
      INFO(rung.name << ", " << key << ": " << r.first << " query tiles, " << r.second
                     << " key tiles of " << tile.rows << " x " << tile.keys);
      CHECK(r.first >= 3);
      CHECK(r.second >= 3);
      // The buffers a block walks its tiles through (rungs 6.9 on have two): the first is used
      // again, in each walk (the dq_kernel's key tiles, as many as these 64-key ones or twice
      // as many at D = 128; the dkdv_kernel's query tiles, as many as these 64-row ones from
      // rung 6.11 on, twice as many at D = 128, four times as many before).
      CHECK((r.second - 1) / tile.stages >= 1);
      CHECK((r.first - 1) / tile.stages >= 1);
    }
  }
}

TEST_CASE("steps 1 and 2 keep S and P in global memory: one Sq x Sk FP32 buffer", "[steps]") {
  // The contrast step 3 draws: the unfused steps' only scratch buffer holds all of S.
  attn::Problem p = attn_test::make(2, 3, 3, 17, 29, 64, attn::DType::fp16, false);
  auto be = attn::make_cpu_backend();
  const attn::DeviceProblem dev(*be, p, attn::make_inputs(p));
  for (const char* name : {"step1_naive", "step2_tiled"}) {
    INFO(name);
    attn::RunContext ctx(*be);
    step_named(name).cpu(dev.params(), ctx);
    CHECK(ctx.scratch_bytes() == size_t(2) * 3 * 17 * 29 * sizeof(float));
  }
}

TEST_CASE("step3 writes only O and LSE: no S/P buffer, inputs untouched", "[step3_fused]") {
  // A long causal problem with GQA and dropout: S would be 2 * 4 * 300 * 1000 floats.
  attn::Problem p = attn_test::make(2, 4, 2, 300, 1000, 128, attn::DType::bf16, true, {}, 0.1f);
  auto be = attn::make_cpu_backend();
  const attn::HostInputs in = attn::make_inputs(p);
  const size_t before = simt::live_allocations().size();
  const attn::DeviceProblem dev(*be, p, in);
  attn::RunContext ctx(*be);
  step_named("step3_fused").cpu(dev.params(), ctx);
  // No scratch memory at all, and no allocation beyond the problem's own buffers.
  CHECK(ctx.scratch_bytes() == 0);
  const auto live = simt::live_allocations();
  CHECK(live.size() == before + 5);  // Q, K, V, O, LSE
  const size_t s_bytes = size_t(p.batch) * p.heads * p.seqlen_q * p.seqlen_k * sizeof(float);
  for (const auto& a : live) CHECK(a.bytes < s_bytes / 4);
  // Q, K and V are byte for byte what was uploaded: the only writes went to O and LSE (and the
  // guard zones around every buffer would have reported a write outside them).
  const attn::AttentionParams& a = dev.params();
  CHECK(std::memcmp(a.q, in.q.data(), in.q.size() * 2) == 0);
  CHECK(std::memcmp(a.k, in.k.data(), in.k.size() * 2) == 0);
  CHECK(std::memcmp(a.v, in.v.data(), in.v.size() * 2) == 0);
  // And O and LSE were all written and correct.
  std::vector<attn::Bits16> o;
  std::vector<float> lse;
  dev.download(o, lse);
  const auto check = attn::check_outputs(p, o, lse, attn::reference_attention(p, in));
  INFO(check.first_failure);
  CHECK(check.passed);
}

namespace {

// Runs step4 on a small causal GQA problem on the CPU backend.
attn::RunOutcome run_step4(const std::string& schedule = "forward") {
  attn::Options o;
  o.problem = attn_test::make(1, 2, 1, 100, 150, 64, attn::DType::fp16, true);
  o.iters = 0;  // the checked run alone
  o.warmup = 0;
  o.backend = "cpu";
  o.schedule = schedule;
  return attn::run_step(step_named("step4_tensorcore"), o);
}

bool step4_passes(const std::string& schedule = "forward") {
  const attn::RunOutcome r = run_step4(schedule);
  return r.exit_code == 0 && r.row.check.passed;
}

using attn_test::line_of;

}  // namespace

TEST_CASE("step4 without its cp.async wait fails", "[step4_tensorcore]") {
  REQUIRE(step4_passes());
  simt::testing::skip_cp_async_wait(true);  // as if every cp.async.wait_group were deleted
  const bool passed = step4_passes();
  simt::testing::skip_cp_async_wait(false);
  CHECK_FALSE(passed);
}

TEST_CASE("step4 without the barrier after the shared-memory stores fails", "[step4_tensorcore]") {
  // The __syncthreads() that follows cp_async_wait: each thread's own copies have landed, but
  // not necessarily the other threads'.
  const int line = line_of("step4_tensorcore/attention.cu", "for every thread, not only for this");
  REQUIRE(line > 0);
  REQUIRE(step4_passes());
  simt::testing::skip_barrier_at("step4_tensorcore/attention.cu", line);
  const bool passed = step4_passes();
  simt::testing::skip_barrier_at(nullptr, 0);
  CHECK_FALSE(passed);
}

TEST_CASE("step4 without the barrier at the end of its tile loop: a reported race under greedy",
          "[step4_tensorcore]") {
  // Without it, a warp that finished tile n goes on to issue the cp.async refill of tile n's
  // stage (for tile n + 2) while other warps still read tile n from it. The greedy schedule runs
  // warp 0 that far ahead; the refill's destination is pending from its issue, and the reading
  // warp's ldmatrix reports it.
  const int line = line_of("step4_tensorcore/attention.cu", "every warp is done with this stage");
  const int ldmatrix_k = line_of("step4_tensorcore/attention.cu", "attn::ldmatrix<4>(kb,");
  // The copies are issued by common/swizzled_tile.h's TileCopy, which step 4's kernel includes.
  const int cp_async = line_of("common/swizzled_tile.h", "cp_async_16(tile + smem");
  REQUIRE(line > 0);
  REQUIRE(step4_passes("greedy"));
  simt::testing::skip_barrier_at("step4_tensorcore/attention.cu", line);
  const attn::RunOutcome r = run_step4("greedy");
  simt::testing::skip_barrier_at(nullptr, 0);
  INFO(r.message);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.message, Catch::Contains("block (") && Catch::Contains("thread (") &&
                            Catch::Contains("ldmatrix at step4_tensorcore/attention.cu:" +
                                            std::to_string(ldmatrix_k)) &&
                            Catch::Contains("issued into them at common/swizzled_tile.h:" +
                                            std::to_string(cp_async)) &&
                            Catch::Contains("has not landed"));
}

// Step 6's pipeline (rung 6.9) has step 4's three ways to go wrong: no cp.async wait, no barrier
// after it (a thread reads the copies of another before they land for it), and no barrier before
// the next tile's copies (a warp refills the buffer others still read). Each is caught.
TEST_CASE("step6 without its cp.async wait or either barrier of its pipeline fails",
          "[step6_backward]") {
  const auto run = [](const std::string& schedule) {
    attn::Options o;
    o.problem = attn_test::make(1, 2, 1, 100, 150, 64, attn::DType::fp16, true);
    o.iters = 0;
    o.warmup = 0;
    o.backend = "cpu";
    o.schedule = schedule;
    return attn::run_step(step_named("step6_backward"), o);
  };
  const auto passes = [&](const std::string& schedule) {
    const attn::RunOutcome r = run(schedule);
    return r.exit_code == 0 && r.row.check.passed;
  };
  const std::string file = "step6_backward/attention.cu";
  const int refill = line_of(file, "every warp is done with the tile before");
  const int landed = line_of(file, "for every thread's copies");
  // The copy of a query tile's Q (common/backward_tiles.h's load_rows_async reports its caller's
  // line, as the ldmatrix in warp_mma_abt2 does).
  const int cp_async = line_of(file, "attn::load_rows_async<D, Br, kThreads>(Qbuf");
  REQUIRE(refill > 0);
  REQUIRE(landed > 0);
  REQUIRE(cp_async > 0);
  REQUIRE(passes("greedy"));
  simt::testing::skip_cp_async_wait(true);
  CHECK_FALSE(passes("forward"));
  simt::testing::skip_cp_async_wait(false);
  simt::testing::skip_barrier_at(file.c_str(), landed);
  CHECK_FALSE(passes("forward"));
  // The greedy schedule runs warp 0 a tile ahead: its refill's destination is pending from its
  // issue, and a warp still reading the tile there reports it.
  simt::testing::skip_barrier_at(file.c_str(), refill);
  const attn::RunOutcome r = run("greedy");
  simt::testing::skip_barrier_at(nullptr, 0);
  INFO(r.message);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.message,
             Catch::Contains("ldmatrix at " + file + ":") &&
                 Catch::Contains("issued into them at " + file + ":" + std::to_string(cp_async)) &&
                 Catch::Contains("has not landed"));
}

// Every tile configuration of step 4 (the default is the matrix above) passes the matrix under
// both schedules, and on the GPU when one is present.
TEST_CASE("step4 passes the matrix in every tile configuration", "[step4_tensorcore]") {
  const attn::StepInfo& step = step_named("step4_tensorcore");
  REQUIRE(step.configs.size() >= 3);
  for (size_t i = 1; i < step.configs.size(); ++i)
    for (const char* schedule : {"forward", "random:11", "reverse", "greedy"}) {
      DYNAMIC_SECTION(step.configs[i].name << " " << schedule) {
        run_matrix(step, "cpu", schedule, "", step.configs[i].name);
      }
    }
}

TEST_CASE("step4 passes the matrix in every tile configuration on the GPU",
          "[gpu][step4_tensorcore]") {
  const attn::StepInfo& step = step_named("step4_tensorcore");
  for (const auto& c : step.configs) run_matrix(step, "gpu", "forward", "", c.name);
}

namespace {

// run_step of step4 on a small problem with these options changed.
attn::RunOutcome step4_with(const std::string& config, const std::string& table, int dim = 64) {
  attn::Options o;
  o.problem = attn_test::make(1, 1, 1, 40, 40, dim, attn::DType::bf16, true);
  o.iters = 0;  // the checked run alone
  o.warmup = 0;
  o.backend = "cpu";
  o.config = config;
  o.tuned_table = table;
  return attn::run_step(step_named("step4_tensorcore"), o);
}

std::string write_table(const std::string& name, const std::string& text) {
  const std::string path = std::string(ATTN_BINARY_DIR) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("step4 picks its tile configuration from --config then the table then the default",
          "[steps]") {
  attn::RunOutcome r = step4_with("", "");  // the committed table: the default on the CPU
  REQUIRE(r.exit_code == 0);
  CHECK(r.row.config == "br64_bc64_w4_s2");
  CHECK_THAT(attn::format_result(r.row), Catch::Contains("config br64_bc64_w4_s2"));
  r = step4_with("br64_bc32_w4_s3", "");
  REQUIRE(r.exit_code == 0);
  CHECK(r.row.config == "br64_bc32_w4_s3");
  CHECK(r.row.config_source == "--config");
  const std::string hdr = "# a comment\narch,dtype,dim,causal,config\n";
  r = step4_with("", write_table("t_ok.csv", hdr + "cpu,bf16,64,1,br128_bc64_w8_s2\n"));
  REQUIRE(r.exit_code == 0);
  CHECK(r.row.config == "br128_bc64_w8_s2");
  CHECK(r.row.config_source == "tuned for cpu");
  r = step4_with("", write_table("t_other.csv", hdr + "sm_80,bf16,64,1,br128_bc64_w8_s2\n"));
  REQUIRE(r.exit_code == 0);
  CHECK(r.row.config == "br64_bc64_w4_s2");
  CHECK(r.row.config_source == "default");
}

TEST_CASE("step4 exits 2 with one line on a malformed table or an unknown config", "[steps]") {
  const std::string hdr = "arch,dtype,dim,causal,config\n";
  for (const auto& [table, why] : std::vector<std::pair<std::string, std::string>>{
           {"arch,dtype,dim,config\n", "expected the header"},
           {hdr + "cpu,bf16,64,1\n", "expected 5 fields"},
           {hdr + "cpu,fp32,64,1,br64_bc64_w4_s2\n", "not fp16 or bf16"},
           {hdr + "cpu,bf16,6x4,1,br64_bc64_w4_s2\n", "not a positive integer"},
           {hdr + "cpu,bf16,64,yes,br64_bc64_w4_s2\n", "not 0 or 1"},
           {hdr + "cpu,bf16,64,1,br64_bc64_w4_s2\ncpu,bf16,64,1,br64_bc64_w4_s2\n", "second row"},
           {hdr + "cpu,bf16,64,1,br999\n", "unknown config br999"},
           {"# only a comment\n", "no header"}}) {
    const attn::RunOutcome r = step4_with("", write_table("t_bad.csv", table));
    INFO(table);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.message, Catch::Contains(why));
    CHECK(r.message.find('\n') == std::string::npos);
  }
  attn::RunOutcome r = step4_with("", "/nonexistent/table.csv");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::Contains("cannot open"));
  r = step4_with("br1_bc1_w1_s1", "");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::Contains("unknown configuration") && Catch::Contains("known: "));
  r = step4_with("br128_bc64_w8_s2", "", 96);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::Contains("is built for head dims 64, 128"));
  r = attn::run_step(step_named("step3_fused"), [] {
    attn::Options o;
    o.backend = "cpu";
    o.config = "br64_bc64_w4_s2";
    return o;
  }());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::Contains("has no tile configurations"));
}

TEST_CASE("a step's --backend gpu without a device exits 2 with a reason", "[steps]") {
  std::string why;
  if (attn::make_gpu_backend(why)) return;  // a GPU is present: nothing to check here
  attn::Options o;
  o.backend = "gpu";
  const attn::RunOutcome r = attn::run_step(step_named("step1_naive"), o);
  CHECK(r.exit_code == 2);
  // The reason is the backend's own: "no CUDA device ..." or, in a CPU-only build, "built without
  // the CUDA toolkit".
  CHECK_THAT(r.message, Catch::Contains("--backend gpu") && Catch::Contains(why));
  CHECK_THAT(
      why, Catch::Contains(attn::gpu_backend_built() ? "CUDA device" : attn::kBuiltWithoutToolkit));
}

TEST_CASE("steps 1 and 2: an S/P buffer that cannot fit is refused with its size", "[steps]") {
  // Sq = Sk = 262144 at H = 1: S/P alone is 256 GiB; it must be refused before anything runs.
  attn::Options o;
  o.problem = attn_test::make(1, 1, 1, 262144, 262144, 64, attn::DType::fp16, false);
  o.backend = "cpu";
  o.check = false;
  for (const char* name : {"step1_naive", "step2_tiled"}) {
    const attn::RunOutcome r = attn::run_step(step_named(name), o);
    INFO(r.message);
    CHECK(r.exit_code == 2);
    CHECK_FALSE(r.ran);
    CHECK_THAT(r.message, Catch::Contains("out of host memory: S/P"));
    CHECK_THAT(r.message, Catch::Contains("needs 256.0 GiB but"));
    CHECK(r.message.find('\n') == std::string::npos);
  }
}

TEST_CASE("steps 3 and 4 skip the work of padding query tiles (--seqlens-q)", "[steps]") {
  // Batch 0 has no queries. Its V is NaN: a kernel that still walked its key tiles would add
  // P = 0 times NaN into O. Skipped, the tiles leave O = 0 and LSE = -inf exactly.
  attn::Problem p = attn_test::with_seqlens_q(
      attn_test::make(2, 2, 2, 70, 90, 64, attn::DType::fp16, false), {0, 70});
  attn::HostInputs in = attn::make_inputs(p);
  for (int64_t x = 0; x < int64_t(2) * 90 * 64; ++x) in.v[x] = 0x7E00;  // batch 0, both heads
  auto be = attn::make_cpu_backend();
  const attn::DeviceProblem dev(*be, p, in);
  for (const char* name : {"step3_fused", "step4_tensorcore"}) {
    INFO(name);
    attn::RunContext ctx(*be);
    step_named(name).cpu(dev.params(), ctx);
    std::vector<attn::Bits16> o;
    std::vector<float> lse;
    dev.download(o, lse);
    int64_t bad = 0;
    for (int64_t x = 0; x < int64_t(2) * 70 * 64; ++x) bad += o[x] != 0;
    for (int64_t x = 0; x < int64_t(2) * 70; ++x) bad += lse[x] != -INFINITY;
    CHECK(bad == 0);
  }
}

// ---- step5: the producer/consumer handshake, and the faults the CPU backend reports -------------

namespace {

constexpr const char* kStep5 = "step5_warpspecialized/attention.cu";

// step5 on a problem long enough for the ring to wrap three times (10 K/V tiles, 3 slots).
attn::RunOutcome run_step5(const std::string& schedule = "forward") {
  attn::Options o;
  o.problem = attn_test::make(1, 2, 1, 70, 600, 64, attn::DType::fp16, true);
  o.iters = 0;  // the checked run alone
  o.warmup = 0;
  o.backend = "cpu";
  o.schedule = schedule;
  o.variant = "sm80";
  return attn::run_step(step_named("step5_warpspecialized"), o);
}

// Runs step5 with `fault` injected at the first line of the kernel containing `text`.
attn::RunOutcome run_step5_with(const std::string& text, simt::testing::Fault fault,
                                const std::string& schedule, int& line) {
  line = line_of(kStep5, text);
  REQUIRE(line > 0);
  simt::testing::fault_at(kStep5, line, fault);
  attn::RunOutcome r = run_step5(schedule);
  simt::testing::fault_at(nullptr, 0, fault);
  INFO(r.message << "\n" << r.row.check.first_failure);
  CHECK(r.exit_code == 1);
  return r;
}

std::string at_line(int line) {
  return "attention.cu:" + std::to_string(line);
}

}  // namespace

TEST_CASE("step5 runs its variant by name, and rejects the ones it lacks",
          "[step5_warpspecialized]") {
  const attn::RunOutcome r = run_step5();
  INFO(r.message << "\n" << r.row.check.first_failure);
  REQUIRE(r.exit_code == 0);
  CHECK(r.row.step == "step5_warpspecialized[sm80]");
  attn::Options o;
  o.backend = "cpu";
  o.variant = "sm70";
  const attn::RunOutcome bad = attn::run_step(step_named("step5_warpspecialized"), o);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.message, Catch::Contains("--variant sm70") && Catch::Contains("sm80"));
  const attn::RunOutcome single = attn::run_step(step_named("step4_tensorcore"), o);
  CHECK(single.exit_code == 2);
  CHECK_THAT(single.message, Catch::Contains("single kernel"));
}

TEST_CASE("step5 faults in the ring are reported with the kernel line", "[step5_warpspecialized]") {
  using simt::testing::Fault;
  for (const char* schedule : {"forward", "reverse", "random:3"}) {
    INFO(schedule);
    int line = 0;
    // A consumer that never releases its slot: the producer waits on "empty" forever.
    const int wait_empty = line_of(kStep5, "wait_parity(&empty[s]");
    attn::RunOutcome r =
        run_step5_with("mbarrier_arrive(&empty[stage])", Fault::skip, schedule, line);
    CHECK_THAT(r.message, Catch::Contains("deadlock") && Catch::Contains(at_line(wait_empty)) &&
                              Catch::Contains("mbarrier empty"));
    // A producer that refills a slot without waiting for "empty": the slot's "full" barrier
    // completes a second phase while consumers still wait for the first.
    // The report names the refill's arrival and where the consumer waits; or, when a consumer
    // reads the slot first, its ldmatrix and the refill's cp.async that has not landed; or, when
    // the producer ran whole laps ahead, the consumers' deadlock on a phase of "full" that has
    // already passed, at their wait.
    const std::string refill = "common/swizzled_tile.h:";  // a cp.async of the ring (TileCopy)
    r = run_step5_with("wait_parity(&empty[s]", Fault::skip, schedule, line);
    CHECK_THAT(r.message,
               (Catch::Contains("parity flipped twice") && Catch::Contains("mbarrier full") &&
                Catch::Contains(at_line(line_of(kStep5, "arrive_noinc(&full[s])"))) &&
                Catch::Contains("still waits at step5_warpspecialized/attention.cu:")) ||
                   (Catch::Contains("ldmatrix at step5_warpspecialized/attention.cu:") &&
                    Catch::Contains("issued into them at " + refill) &&
                    Catch::Contains("has not landed")) ||
                   (Catch::Contains("deadlock") && Catch::Contains("on mbarrier full at") &&
                    Catch::Contains(at_line(line_of(kStep5, "wait_parity(&full[stage]")))));
    // The producer waiting on the consumers' parity: its first lap blocks on a fresh barrier.
    r = run_step5_with("wait_parity(&empty[s]", Fault::flip_parity, schedule, line);
    CHECK_THAT(r.message, Catch::Contains("deadlock") && Catch::Contains(at_line(line)));
    // A consumer waiting on the wrong parity of "full" passes its first wait at once and reads
    // the slot before anything landed there: shared memory's poison reaches O as NaN (or the
    // barriers catch the misstep, with the line).
    for (const char* wait : {"wait_parity(q_full", "wait_parity(&full[stage]"}) {
      r = run_step5_with(wait, Fault::flip_parity, schedule, line);
      INFO(r.message);
      CHECK((r.row.check.first_failure.find("nan") != std::string::npos ||
             r.message.find(at_line(line)) != std::string::npos ||
             (r.message.find("has not landed") != std::string::npos &&
              r.message.find("issued into them at " + refill) != std::string::npos)));
    }
  }
}

// ---- step5's Hopper kernel: TMA, wgmma, the ring and the ping-pong, with planted faults
// ----------

namespace {

constexpr const char* kStep5Hopper = "step5_warpspecialized/attention_sm90a.cu";

// The Hopper kernel on a problem whose ring wraps three times (10 K/V tiles of 192 keys, 3 slots)
// and whose 70 query rows reach both consumer warpgroups; scale < 0 folds the sign into Q in
// shared memory.
attn::RunOutcome run_sm90a(const std::string& schedule, float scale = 0.0f) {
  attn::Options o;
  o.problem = attn_test::make(1, 2, 1, 70, 1900, 64, attn::DType::fp16, true);
  if (scale != 0.0f) o.problem.scale = scale;
  o.iters = 0;  // the checked run alone
  o.warmup = 0;
  o.backend = "cpu";
  o.schedule = schedule;
  o.variant = "sm90a";
  return attn::run_step(step_named("step5_warpspecialized"), o);
}

// Runs it with `fault` injected at the first line of `file` (attention_sm90a.cu, or a header it
// calls) containing `text`; the run must fail. Returns the report (the message, or the check's
// first failure).
std::string sm90a_fault(const std::string& text, simt::testing::Fault fault,
                        const std::string& schedule, float scale = 0.0f, int value = 0,
                        const char* file = kStep5Hopper) {
  const int line = line_of(file, text);
  REQUIRE(line > 0);
  simt::testing::fault_at(file, line, fault, value);
  const attn::RunOutcome r = run_sm90a(schedule, scale);
  simt::testing::fault_at(nullptr, 0, fault);
  INFO(text << ": " << r.message << "\n" << r.row.check.first_failure);
  CHECK(r.exit_code == 1);
  return r.message + "\n" + r.row.check.first_failure;
}

std::string sm90a_line(const std::string& text) {
  return "attention_sm90a.cu:" + std::to_string(line_of(kStep5Hopper, text));
}

}  // namespace

TEST_CASE("step5 sm90a runs by name and records its variant", "[step5_warpspecialized]") {
  for (float scale : {0.0f, -0.2f}) {
    const attn::RunOutcome r = run_sm90a("greedy", scale);
    INFO(r.message << "\n" << r.row.check.first_failure);
    REQUIRE(r.exit_code == 0);
    CHECK(r.row.step == "step5_warpspecialized[sm90a]");
  }
}

TEST_CASE("step5 sm90a faults in the ring, wgmma and the proxy are reported with the kernel line",
          "[step5_warpspecialized]") {
  using simt::testing::Fault;
  for (const char* schedule : {"forward", "reverse", "random:3", "greedy"}) {
    INFO(schedule);
    // A consumer that never releases a slot: the producer waits on "empty" forever.
    std::string r = sm90a_fault("mbarrier_arrive(&empty[prev])", Fault::skip, schedule);
    CHECK_THAT(r, Catch::Contains("deadlock") && Catch::Contains("mbarrier empty") &&
                      Catch::Contains(sm90a_line("wait_parity(&empty[s]")));
    // A producer that refills a slot without waiting for "empty": TMA overwrites K or V while a
    // wgmma still reads it, or a "full" phase completes twice under a waiting consumer.
    r = sm90a_fault("wait_parity(&empty[s]", Fault::skip, schedule);
    CHECK_THAT(r, Catch::Contains(kStep5Hopper) &&
                      (Catch::Contains("deadlock") || Catch::Contains("has not landed") ||
                       Catch::Contains("changed before this wait retired it")));
    // The producer waiting on the consumers' parity: its first lap blocks on a fresh barrier.
    r = sm90a_fault("wait_parity(&empty[s]", Fault::flip_parity, schedule);
    CHECK_THAT(r,
               Catch::Contains("deadlock") && Catch::Contains(sm90a_line("wait_parity(&empty[s]")));
    // A consumer waiting on the wrong parity of "full" reads a slot before its TMA landed.
    r = sm90a_fault("wait_parity(&full[slot], phase);  // this tile", Fault::flip_parity, schedule);
    CHECK_THAT(r, Catch::Contains("has not landed") &&
                      Catch::Contains(sm90a_line("attn::tma_load_3d(k_slot")));
    // The softmax using S before the wgmma that computes it has retired (the mask writes it).
    r = sm90a_fault("wgmma_wait<1>()", Fault::skip, schedule);
    CHECK_THAT(r, Catch::Contains("was written before this wait retired it") &&
                      Catch::Contains(sm90a_line("attn::wgmma_ss<Bc, T>")));
    // Q's sign flipped by ordinary stores (common/hopper.h's negate_tile_rows), then read by wgmma
    // without fence.proxy.async.
    r = sm90a_fault("fence_proxy_async_shared();  // Q's sign", Fault::skip, schedule, -0.2f, 0,
                    "common/hopper.h");
    CHECK_THAT(r, Catch::Contains("fence.proxy.async") && Catch::Contains(kStep5Hopper));
    // The ones of the row-sum product (P 1) stored without the fence: wgmma may not see them.
    r = sm90a_fault("fence_proxy_async_shared();  // the ones", Fault::skip, schedule);
    CHECK_THAT(r, Catch::Contains("fence.proxy.async") && Catch::Contains(kStep5Hopper));
  }
}

TEST_CASE("step5 sm90a: orders the GPU does not promise are reported with the kernel line",
          "[step5_warpspecialized]") {
  using simt::testing::Fault;
  const std::string group_barrier = "named_barrier_sync(kGroupBarrier + group, 128)";
  const int group_line = line_of(kStep5Hopper, group_barrier);
  const int init_sync = line_of(kStep5Hopper, "__syncthreads();  // the barriers exist");
  REQUIRE(group_line > 0);
  REQUIRE(init_sync > 0);
  for (const char* schedule : {"forward", "reverse", "random:3", "greedy"}) {
    INFO(schedule);
    // Both consumer warpgroups on one named barrier (kGroupBarrier instead of kGroupBarrier +
    // group), which only the sign fold of a negative scale uses: two groups of four warps on one
    // id, whose arrivals a GPU may mix.
    std::string r = sm90a_fault(group_barrier, Fault::barrier_id, schedule, -0.2f, 3);
    CHECK_THAT(r, Catch::Contains("bar.sync 3 (128 threads) completed at " +
                                  std::string(kStep5Hopper) + ":" + std::to_string(group_line)) &&
                      (Catch::Contains("two groups of warps share this barrier id") ||
                       Catch::Contains("more warps than 128 threads make")));
    // No __syncthreads() after the mbarriers are initialised: the consumers' waits (or, when they
    // run first, the producer's ring) use barriers whose initialisation nothing orders before.
    simt::testing::skip_barrier_at(kStep5Hopper, init_sync);
    const attn::RunOutcome out = run_sm90a(schedule);
    simt::testing::skip_barrier_at(nullptr, 0);
    INFO(out.message);
    CHECK(out.exit_code == 1);
    CHECK_THAT(out.message,
               Catch::Contains(kStep5Hopper) &&
                   (Catch::Contains("which nothing orders after that initialisation") ||
                    Catch::Contains("used before mbarrier.init")));
  }
}

TEST_CASE("step5 sm80: a ring used without the barrier after its initialisation is reported",
          "[step5_warpspecialized]") {
  const int init_sync = line_of(kStep5, "__syncthreads();  // the barriers exist");
  REQUIRE(init_sync > 0);
  for (const char* schedule : {"forward", "reverse", "random:3", "greedy"}) {
    INFO(schedule);
    simt::testing::skip_barrier_at(kStep5, init_sync);
    const attn::RunOutcome r = run_step5(schedule);
    simt::testing::skip_barrier_at(nullptr, 0);
    INFO(r.message);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.message, Catch::Contains(kStep5) &&
                              (Catch::Contains("which nothing orders after that initialisation") ||
                               Catch::Contains("used before mbarrier.init")));
  }
}
