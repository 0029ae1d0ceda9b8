// Copies of steps 4, 5 and 6 with one planted bug each (tests/CMakeLists.txt: attn_planted_copy),
// built for bf16 at head dim 64: the tests that exist for these bugs must catch them. Steps 4 and
// 5's pass the test matrix; only rows that end on a tile boundary (tests/boundary.h) or the
// backend's ordering checks see them. Step 6's are the gradient check's to see.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "tests/boundary.h"
#include "tests/scoped_env.h"
#include "tests/source_line.h"

namespace step4_unmasked::cpu {  // the unmasked-tile count from row_keys_end(...) + 1
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5_unmasked::cpu {  // the same, in both step 5 kernels
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}  // namespace step5_unmasked::cpu
namespace step5_block_rows::cpu {  // the Hopper block's key range taken for row Br - 1
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5_early_release::cpu {  // the last slot released above the wait for its wgmma
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5_expect_elements::cpu {  // expect_tx(kSlotBytes / sizeof(T)): elements, not bytes
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5_full_count::cpu {  // "full" initialised for 31 of the producer's 32 lanes
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5_epilogue_wait::cpu {  // wgmma_wait<1> before the epilogue
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5_wrong_stage::cpu {  // S = Q K^T from the slot after the tile's
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}

namespace step5_q_empty::cpu {  // the producer's next Q loaded without waiting for "q_empty"
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5_no_wake::cpu {  // the producer out of work items without waking the consumers
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5_ring_slots::cpu {  // 3 ring slots where D = 128's wide tiles leave room for 2
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5_one_head::cpu {  // a packed tile's Q box one head deep
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5_padding_barrier::cpu {  // rung 5.3's zero_padding without its named barrier
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}

namespace step6::cpu {  // the step itself, for contrast
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6_no_delta::cpu {  // dS = P * dP: D_i left out
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6_unmasked::cpu {  // every key of the batch seen by every row
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6_visible_dkdv::cpu {  // dkdv_kernel's unmasked warp tiles one key too soon
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6_visible_dq::cpu {  // dq_kernel's likewise
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step6_wrong_phase::cpu {  // the sm90a dkdv_kernel waiting on a tile's other phase
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}

namespace {

using attn_test::line_of;

// The boundary shapes of the planted kernel's own tile, bf16, D = 64, with and without dropout:
// the report of every problem that fails (empty when all pass).
std::string boundary_failures(const attn::StepInfo& step) {
  std::string failures;
  for (float dropout : {0.0f, 0.1f}) {
    const attn::RunContext::Tile tile = attn_test::tile_of(step, "", "", 64, dropout);
    REQUIRE(tile.keys > 0);
    for (const attn::Problem& p : attn_test::boundary_problems(tile, 64, dropout))
      if (const std::string r = attn_test::run_boundary(step, "", "", p, tile.keys, "forward");
          !r.empty())
        failures += p.describe() + ": " + r + "\n";
  }
  return failures;
}

}  // namespace

TEST_CASE("an unmasked-tile count one too high fails a tile-boundary shape", "[planted]") {
  for (const attn::StepInfo& step :
       {attn::StepInfo{.name = "step4 (planted)", .cpu = &step4_unmasked::cpu::run},
        attn::StepInfo{.name = "step5 sm80 (planted)", .cpu = &step5_unmasked::cpu::run},
        attn::StepInfo{.name = "step5 sm90a (planted)", .cpu = &step5_unmasked::cpu::run_sm90a}}) {
    const std::string failures = boundary_failures(step);
    INFO(step.name << ":\n" << failures);
    CHECK_FALSE(failures.empty());
    // The leaked key is past the row's end: O moves (a key zero-filled past the tensor would
    // move only LSE, by less than its tolerance, so the shapes keep their keys in the tensor).
    CHECK_THAT(failures, Catch::Contains("O[b="));
  }
}

TEST_CASE("a Hopper block that takes its key range for row Br - 1 fails a tile-boundary shape",
          "[planted]") {
  const std::string failures = boundary_failures(
      {.name = "step5 sm90a (planted)", .cpu = &step5_block_rows::cpu::run_sm90a});
  INFO(failures);
  CHECK_THAT(failures, Catch::Contains("O[b="));
}

TEST_CASE("a Hopper kernel that releases its last slot before the wait is reported at the arrival",
          "[planted]") {
  // In the planted copy the arrival and the wait swapped lines: the arrival is on the wait's line.
  const std::string file = "step5_warpspecialized/attention_sm90a.cu";
  const int arrive = line_of(file, "the last P V has retired");
  REQUIRE(arrive > 0);
  const attn::StepInfo step{.name = "step5 sm90a (planted)",
                            .cpu = &step5_early_release::cpu::run_sm90a};
  for (const char* schedule : {"forward", "reverse", "random:3", "greedy"}) {
    // Two K/V tiles: the last slot is never refilled, so no later copy would expose the bug.
    const attn::Problem p = attn_test::make(1, 2, 1, 70, 300, 64, attn::DType::bf16, false);
    const std::string r = attn_test::run_boundary(step, "", "", p, 192, schedule);
    INFO(schedule << ": " << r);
    CHECK_THAT(r, Catch::Contains("mbarrier.arrive at " + file + ":" + std::to_string(arrive)) &&
                      Catch::Contains("mbarrier empty") &&
                      Catch::Contains("no wgmma.wait_group has retired it"));
  }
}

TEST_CASE("Hopper consumers that zero a batch's padding keys without their barrier are reported",
          "[planted]") {
  // Each warpgroup zeroes its share of the V rows past the batch's key length and fences them;
  // without the barrier, the other warpgroup's P V wgmma reads them unordered.
  const std::string file = "step5_warpspecialized/rung3_warpgroups.cu";
  const int pv = line_of(file, "attn::wgmma_rs<D, T, true>(o_acc, p_frag[kc], vd, true);");
  REQUIRE(pv > 0);
  const attn::StepInfo step{.name = "rung 5.3 (planted)", .cpu = &step5_padding_barrier::cpu::run};
  attn::Problem p = attn_test::make(2, 2, 1, 70, 300, 64, attn::DType::bf16, false, {300, 100});
  for (const char* schedule : {"forward", "greedy"}) {
    const std::string r = attn_test::run_boundary(step, "", "", p, 64, schedule);
    INFO(schedule << ": " << r);
    CHECK_THAT(r, Catch::Contains("wgmma.mma_async at " + file + ":" + std::to_string(pv)) &&
                      Catch::Contains("does not happen before this wgmma"));
  }
}

namespace {
// A problem whose ring wraps (several K/V tiles) and reaches both consumer warpgroups.
attn::Problem ring_problem() {
  return attn_test::make(1, 2, 1, 70, 700, 64, attn::DType::bf16, true);
}
}  // namespace

TEST_CASE("expect_tx in elements: the TMA that over-delivers is reported", "[planted]") {
  const std::string file = "step5_warpspecialized/attention_sm90a.cu";
  // The slot's boxes: K then V, per 64 columns. Half the bytes announced: the V box over-delivers.
  const int v_box = line_of(file, "attn::tma_load_3d(v_slot");
  REQUIRE(v_box > 0);
  const attn::StepInfo step{.name = "planted", .cpu = &step5_expect_elements::cpu::run_sm90a};
  for (const char* schedule : {"forward", "reverse", "random:3", "greedy"}) {
    const std::string r = attn_test::run_boundary(step, "", "", ring_problem(), 192, schedule);
    INFO(schedule << ": " << r);
    CHECK_THAT(r,
               Catch::Contains("cp.async.bulk.tensor at " + file + ":" + std::to_string(v_box)) &&
                   Catch::Contains("mbarrier full") &&
                   Catch::Contains("more than the 24576 its expect_tx announced"));
  }
}

TEST_CASE("a ring barrier expecting one arrival too few names the barrier the copy lands through",
          "[planted]") {
  const std::string file = "step5_warpspecialized/attention.cu";
  const attn::StepInfo step{.name = "planted", .cpu = &step5_full_count::cpu::run};
  for (const char* schedule : {"forward", "reverse", "random:3", "greedy"}) {
    const std::string r = attn_test::run_boundary(step, "", "", ring_problem(), 64, schedule);
    INFO(schedule << ": " << r);
    // A consumer reads a chunk of the 32nd lane's copies, which arrive on the next phase; or that
    // lane's arrival finds the phase over (the producer's lanes race ahead).
    CHECK_THAT(r, Catch::Contains(file) &&
                      (Catch::Contains("has not landed (it lands when mbarrier full at shared") ||
                       Catch::Contains("more arrivals than expected")));
    CHECK_THAT(r, !Catch::Contains("cp.async.wait_group"));
  }
}

TEST_CASE("a Hopper epilogue after wgmma_wait<1> is reported at the kernel line", "[planted]") {
  const std::string file = "step5_warpspecialized/attention_sm90a.cu";
  const int release = line_of(file, "before its slot is released");
  REQUIRE(release > 0);
  const attn::StepInfo step{.name = "planted", .cpu = &step5_epilogue_wait::cpu::run_sm90a};
  for (const char* schedule : {"forward", "reverse", "random:3", "greedy"}) {
    const std::string r = attn_test::run_boundary(step, "", "", ring_problem(), 192, schedule);
    INFO(schedule << ": " << r);
    CHECK_THAT(r, Catch::Contains("mbarrier.arrive at " + file + ":" + std::to_string(release)) &&
                      Catch::Contains("no wgmma.wait_group has retired it"));
  }
}

TEST_CASE("a Hopper consumer reading the wrong ring slot is reported at its wgmma", "[planted]") {
  const std::string file = "step5_warpspecialized/attention_sm90a.cu";
  const int wgmma = line_of(file, "attn::wgmma_ss<Bc, T>(s,");
  REQUIRE(wgmma > 0);
  const attn::StepInfo step{.name = "planted", .cpu = &step5_wrong_stage::cpu::run_sm90a};
  for (const char* schedule : {"forward", "reverse", "random:3", "greedy"}) {
    // One K/V tile: the next slot is never written. Several: it is in flight, or not written yet.
    for (int sk : {150, 700}) {
      const attn::Problem p = attn_test::make(1, 2, 1, 70, sk, 64, attn::DType::bf16, false);
      const std::string r = attn_test::run_boundary(step, "", "", p, 192, schedule);
      INFO(schedule << " Sk " << sk << ": " << r);
      CHECK_THAT(r, Catch::Contains("wgmma.mma_async at " + file + ":" + std::to_string(wgmma)) &&
                        (Catch::Contains("nothing has written since the block started") ||
                         Catch::Contains("which has not landed")));
    }
  }
}

TEST_CASE("step 6 without D_i, or without its causal mask, fails the gradient check", "[planted]") {
  // bf16, D = 64 (the planted copies' one shape); GQA and causal, with Sq != Sk.
  const attn::Problem p = attn_test::make(1, 4, 2, 17, 23, 64, attn::DType::bf16, true);
  auto run = [&](attn::StepFn fn) {
    attn::Options o;
    o.problem = p;
    o.iters = 0;
    o.warmup = 0;
    o.backend = "cpu";
    return attn::run_step({.name = "step6 (planted)", .cpu = fn, .backward = true}, o);
  };
  attn::RunOutcome r = run(&step6::cpu::run);
  CHECK(r.exit_code == 0);
  r = run(&step6_no_delta::cpu::run);
  INFO(r.row.check.first_failure);
  CHECK(r.exit_code == 1);
  CHECK(r.row.check.first_failure.rfind("dQ[", 0) == 0);  // dQ first, the worst element named
  r = run(&step6_unmasked::cpu::run);
  INFO(r.row.check.first_failure);
  CHECK(r.exit_code == 1);
  CHECK(r.row.check.first_failure.rfind("dQ[", 0) == 0);
}

TEST_CASE("step 6 calling a warp tile all visible one key too soon fails the gradient check",
          "[planted]") {
  // Causal with Sk - Sq = 14: row 0 sees 15 keys, all but the last of dkdv_kernel's first warp
  // tile, and row 48 (a dq_kernel warp's first) all but the last of the first 64-key tile.
  const attn::Problem p = attn_test::make(1, 2, 2, 64, 78, 64, attn::DType::bf16, true);
  for (const attn::StepFn fn :
       {&step6::cpu::run, &step6_visible_dkdv::cpu::run, &step6_visible_dq::cpu::run}) {
    attn::Options o;
    o.problem = p;
    o.iters = 0;
    o.warmup = 0;
    o.backend = "cpu";
    const attn::RunOutcome r =
        attn::run_step({.name = "step6 (planted)", .cpu = fn, .backward = true}, o);
    INFO(r.message << r.row.check.first_failure);
    CHECK(r.exit_code == (fn == &step6::cpu::run ? 0 : 1));
  }
}

TEST_CASE("a persistent producer that loads the next Q before q_empty is reported at the wgmma",
          "[planted]") {
  // One SM (SIMT_SMS=1): the block takes all eight query tiles, and the producer, no longer
  // waiting for the consumers to release Q, loads the next tile's Q over the one they still read.
  const std::string file = "step5_warpspecialized/attention_sm90a.cu";
  const int wgmma = line_of(file, "attn::wgmma_ss<Bc, T>(s,");
  const int q_load = line_of(file, "attn::tma_load_3d(Qs + blk * Br * 64");
  REQUIRE((wgmma > 0 && q_load > 0));
  const attn_test::ScopedEnv one_sm("SIMT_SMS", "1");
  const attn::StepInfo step{.name = "planted", .cpu = &step5_q_empty::cpu::run_sm90a};
  const attn::Problem p = attn_test::make(2, 2, 1, 200, 300, 64, attn::DType::bf16, true);
  for (const char* schedule : {"forward", "reverse", "random:3", "greedy"}) {
    const std::string r = attn_test::run_boundary(step, "", "", p, 192, schedule);
    INFO(schedule << ": " << r);
    CHECK_THAT(
        r, Catch::Contains("wgmma.mma_async at " + file + ":" + std::to_string(wgmma)) &&
               Catch::Contains("the TMA load issued at " + file + ":" + std::to_string(q_load)) &&
               Catch::Contains("has not landed"));
  }
}

TEST_CASE("a persistent producer out of work that does not wake the consumers is a deadlock",
          "[planted]") {
  // The consumers learn that the work has run out from the item the producer hands them with
  // q_full; without that arrival they wait at their q_full wait forever, causal (items from the
  // counter) or not (items in a static order), whatever the order the blocks run in.
  const std::string file = "step5_warpspecialized/attention_sm90a.cu";
  const int wait = line_of(file, "attn::mbarrier_wait_parity(q_full, w % 2);");
  REQUIRE(wait > 0);
  const attn_test::ScopedEnv two_sms("SIMT_SMS", "2");
  const attn::StepInfo step{.name = "planted", .cpu = &step5_no_wake::cpu::run_sm90a};
  for (const bool causal : {true, false}) {
    const attn::Problem p = attn_test::make(2, 2, 1, 200, 300, 64, attn::DType::bf16, causal);
    for (const char* schedule : {"forward", "reverse", "random:3", "greedy"}) {
      const std::string r = attn_test::run_boundary(step, "", "", p, 192, schedule);
      INFO(schedule << (causal ? " causal: " : ": ") << r);
      CHECK_THAT(r, Catch::Contains("deadlock") &&
                        Catch::Contains("on mbarrier q_full at shared") &&
                        Catch::Contains(file + ":" + std::to_string(wait)));
    }
  }
}

TEST_CASE("a packed tile whose Q box is one head deep is a deadlock at the consumers' Q wait",
          "[planted]") {
  // Four query heads of one K/V head, 17 rows each: one tile of 4 x 32 rows. A box of 32 rows of
  // one head brings a quarter of the bytes q_full expects; its phase never completes.
  const std::string file = "step5_warpspecialized/attention_sm90a.cu";
  const int wait = line_of(file, "attn::mbarrier_wait_parity(q_full, w % 2);");
  REQUIRE(wait > 0);
  const attn::StepInfo step{.name = "planted", .cpu = &step5_one_head::cpu::run_sm90a};
  const attn::Problem p = attn_test::make(1, 4, 1, 17, 300, 64, attn::DType::bf16, true);
  for (const char* schedule : {"forward", "reverse", "random:3", "greedy"}) {
    const std::string r = attn_test::run_boundary(step, "", "", p, 192, schedule);
    INFO(schedule << ": " << r);
    CHECK_THAT(r, Catch::Contains("deadlock") && Catch::Contains("on mbarrier q_full at shared") &&
                      Catch::Contains(file + ":" + std::to_string(wait)));
  }
}

TEST_CASE("a producer that cycles through more ring slots than the tile shape has is reported",
          "[planted]") {
  // At D = 128 the key tiles are 176 wide and shared memory holds 2 of their slots. A producer
  // that still takes 3 loads its third K tile past the end of the block's shared memory,
  // whatever the order the threads run in.
  const std::string file = "step5_warpspecialized/attention_sm90a.cu";
  const int k_box = line_of(file, "attn::tma_load_3d(k_slot");
  REQUIRE(k_box > 0);
  const attn::StepInfo step{.name = "planted", .cpu = &step5_ring_slots::cpu::run_sm90a};
  const attn::Problem p = attn_test::make(1, 2, 1, 100, 700, 128, attn::DType::bf16, false);
  for (const char* schedule : {"forward", "reverse", "random:3", "greedy"}) {
    const std::string r = attn_test::run_boundary(step, "", "", p, 176, schedule);
    INFO(schedule << ": " << r);
    CHECK_THAT(r,
               Catch::Contains("cp.async.bulk.tensor at " + file + ":" + std::to_string(k_box)) &&
                   Catch::Contains("address is not inside the block's"));
  }
}

TEST_CASE("step 6's sm90a tiles read before TMA wrote them are reported with the kernel line",
          "[planted]") {
  // dkdv_kernel waiting on a buffer's mbarrier for the phase before the tile's: that one
  // completed long ago (or is the one before the first), the wait returns at once, and the
  // products read Q and dO that the tile's TMA copies have not yet written.
  const std::string file = "step6_backward/attention_sm90a.cu";
  const int products = line_of(file, "attn::warp_mma_abt2<T, D>(qk, dov, Ks, Vs, kw,");
  const int q_box = line_of(file, "attn::tma_load_tile<D, Br>(Qbuf + off");
  const int do_box = line_of(file, "attn::tma_load_tile<D, Br>(dObuf + off");
  REQUIRE((products > 0 && q_box > 0 && do_box > 0));
  const attn::Problem p = attn_test::make(1, 2, 1, 200, 70, 64, attn::DType::bf16, false);
  for (const char* schedule : {"forward", "reverse", "random:3", "greedy"}) {
    attn::Options o;
    o.problem = p;
    o.iters = 0;
    o.warmup = 0;
    o.backend = "cpu";
    o.schedule = schedule;
    const attn::RunOutcome r = attn::run_step(
        {.name = "step6 sm90a (planted)", .cpu = &step6_wrong_phase::cpu::run, .backward = true},
        o);
    INFO(schedule << ": " << r.message);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.message,
               Catch::Contains("ldmatrix at " + file + ":" + std::to_string(products)) &&
                   Catch::Contains("TMA load (cp.async.bulk.tensor)") &&
                   (Catch::Contains(file + ":" + std::to_string(q_box) + " has not landed") ||
                    Catch::Contains(file + ":" + std::to_string(do_box) + " has not landed")) &&
                   Catch::Contains("a wait on the wrong parity"));
  }
}
