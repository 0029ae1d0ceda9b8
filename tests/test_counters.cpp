// The counters (common/simt/counters.h): known answers from NVIDIA's documents on small access
// patterns (tests/counters_kernels.cpp), never from the steps; then the steps' budgets in counts,
// and copies of steps 2 and 4 with their padding or swizzle removed, which must show the
// conflicts at the lines that read the tiles.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/harness.h"
#include "common/simt/counters.h"
#include "tests/matrix.h"
#include "tests/scoped_env.h"
#include "tests/simt_buffer.h"
#include "tests/source_line.h"
#include "tests/steps.h"

namespace counters_kernels {
void run_shared(int bytes, int stride, uint32_t* out);
void run_ldmatrix(int layout, uint32_t* out);
void run_global(const unsigned char* in, int bytes, int stride, int offset, uint32_t* out);
void run_cp_async(const unsigned char* in, int stride, uint32_t* out);
void run_arrive_then_store(uint32_t* out);
void run_atomic_adds(float* out, int blocks, int times);
}  // namespace counters_kernels
namespace step4_unswizzled::cpu {  // step 4 with the XOR swizzle removed from Tile::offset
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step2_unpadded::cpu {  // step 2 with kPad = 0
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::rung6::counted {  // a block per query tile
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::rung7::counted {  // persistent, static order
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::rung8::counted {  // persistent, causal tiles from the counter
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::rung9::counted {  // the same, in wider key tiles above D = 64
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::rung10::counted {  // the same, a query tile's keys split when SMs would idle
void run(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5::counted {  // the same, a GQA group's query heads packed into a tile
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5_twice::cpu {  // the counter's items not offset by the grid's first ones
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}
namespace step5_lost::cpu {  // every part floor(n / splits) key tiles: the last ones never taken
void run_sm90a(const attn::AttentionParams& p, attn::RunContext& ctx);
}

using simt::counters::Counts;
using simt::counters::Report;

namespace {

using attn_test::line_of;

// The counts of the report's lines at `file`:line of `text` (a helper's line inlined anywhere).
Counts at(const Report& r, const std::string& file, const std::string& text) {
  const int line = line_of(file, text);
  REQUIRE(line > 0);
  const std::string where = file + ":" + std::to_string(line);
  Counts sum;
  int found = 0;
  for (const simt::counters::Line& l : r.lines)
    if (l.where == where || l.where.rfind(where + ",", 0) == 0) sum.add(l.counts), ++found;
  INFO(where);
  REQUIRE(found > 0);
  return sum;
}

template <typename F>
Report count(F&& f) {
  simt::counters::start();
  f();
  return simt::counters::stop();
}

constexpr const char* kKernels = "tests/counters_kernels.cpp";

}  // namespace

// CUDA C++ Programming Guide, "Compute Capability 5.x", "Shared Memory" (the rules 8.x and 9.x
// keep): 32 banks; successive 32-bit words map to successive banks; threads that access any
// address within the same 32-bit word do not conflict (the word is broadcast); its figure of
// strided accesses: stride 1 and odd strides conflict-free, stride 2 a 2-way conflict, a stride of
// 32 words 32 accesses to one bank. Nsight Compute Kernel Profiling Guide, "Metrics Decoder": a
// wavefront is the work processed in one pass; bank conflicts are the wavefronts beyond the
// fewest the request needs.
TEST_CASE("counters: 32-bit shared loads at strides 1, 2, 3 and 32 words, and a broadcast",
          "[counters]") {
  attn_test::DeviceBuf<uint32_t> out(32, "out");
  for (const auto& [stride, wavefronts] :
       std::vector<std::pair<int, uint64_t>>{{4, 1}, {8, 2}, {12, 1}, {128, 32}, {0, 1}}) {
    const Report r = count([&] { counters_kernels::run_shared(4, stride, out.ptr); });
    const Counts c = at(r, kKernels, "the 4-byte load");
    INFO("stride " << stride << " bytes");
    CHECK(c.lds_inst == 1);
    CHECK(c.lds_wavefronts == wavefronts);
    CHECK(c.lds_conflicts() == wavefronts - 1);
  }
}

// The same bank rule for wider accesses, with the Profiling Guide's wavefront of at most 128 bytes
// (32 banks x 4 bytes): a warp's 8-byte accesses are served per half warp, 16-byte ones per
// quarter warp, so that the fewest wavefronts are 2 and 4; within each, lanes whose words share a
// bank conflict (stride 16 bytes at 8 bytes each: lanes l and l + 8 of a half warp; stride 32
// bytes at 16 bytes each: lanes l and l + 4 of a quarter warp).
TEST_CASE("counters: 64- and 128-bit shared loads are served by half and quarter warps",
          "[counters]") {
  attn_test::DeviceBuf<uint32_t> out(32, "out");
  struct Case {
    int bytes, stride;
    uint64_t wavefronts, conflicts;
    const char* line;
  };
  for (const Case& k :
       {Case{8, 8, 2, 0, "the 8-byte load"}, Case{8, 16, 4, 2, "the 8-byte load"},
        Case{16, 16, 4, 0, "the 16-byte load"}, Case{16, 32, 8, 4, "the 16-byte load"}}) {
    const Report r = count([&] { counters_kernels::run_shared(k.bytes, k.stride, out.ptr); });
    const Counts c = at(r, kKernels, k.line);
    INFO(k.bytes << " bytes at stride " << k.stride);
    CHECK(c.lds_inst == 1);
    CHECK(c.lds_wavefronts == k.wavefronts);
    CHECK(c.lds_conflicts() == k.conflicts);
  }
}

// PTX ISA, "ldmatrix": each 8x8 matrix is eight rows of 16 bytes whose addresses lanes 8j..8j+7
// give; with the bank rule above, eight rows 128 bytes apart fall on the same four banks (8
// wavefronts a matrix), rows padded to 144 bytes or XOR-swizzled by the row (chunk c ^ (r % 8))
// on eight distinct groups of four banks (1 a matrix).
TEST_CASE("counters: ldmatrix on unpadded, padded and swizzled rows", "[counters]") {
  attn_test::DeviceBuf<uint32_t> out(32, "out");
  for (const auto& [layout, wavefronts] :
       std::vector<std::pair<int, uint64_t>>{{0, 32}, {1, 4}, {2, 4}}) {
    const Report r = count([&] { counters_kernels::run_ldmatrix(layout, out.ptr); });
    INFO("layout " << layout);
    CHECK(r.total.ldsm_inst == 1);
    CHECK(r.total.ldsm_wavefronts == wavefronts);
    CHECK(r.total.ldsm_conflicts() == wavefronts - 4);
  }
}

// Profiling Guide, "Metrics Decoder": a global memory instruction sends one request; a sector is
// an aligned 32-byte chunk, and a request accesses the sectors its threads' addresses fall in.
TEST_CASE("counters: global loads: coalesced, misaligned, strided, 16-byte and broadcast",
          "[counters]") {
  attn_test::DeviceBuf<unsigned char> in(8192, "in");
  attn_test::DeviceBuf<uint32_t> out(32, "out");
  struct Case {
    int bytes, stride, offset;
    uint64_t sectors;
    const char* line;
  };
  for (const Case& k :
       {Case{4, 4, 0, 4, "the global 4-byte load"}, Case{4, 4, 4, 5, "the global 4-byte load"},
        Case{4, 8, 0, 8, "the global 4-byte load"}, Case{4, 128, 0, 32, "the global 4-byte load"},
        Case{4, 0, 0, 1, "the global 4-byte load"},
        Case{16, 16, 0, 16, "the global 16-byte load"}}) {
    const Report r =
        count([&] { counters_kernels::run_global(in.ptr, k.bytes, k.stride, k.offset, out.ptr); });
    const Counts c = at(r, kKernels, k.line);
    INFO(k.bytes << " bytes at stride " << k.stride << ", offset " << k.offset);
    CHECK(c.gld_requests == 1);
    CHECK(c.gld_sectors == k.sectors);
    CHECK(c.gld_bytes == uint64_t(32 * k.bytes));
  }
}

// PTX ISA, "bar.sync, bar.arrive": bar.arrive "does not cause any waiting by the executing
// threads". A warp that only arrives is not synchronised when the barrier completes: its later
// accesses stay one warp-level instruction each, under every schedule (the reverse one runs warp
// 1 into its wait first, so that the barrier completes between warp 0's lanes).
TEST_CASE("counters: a warp that only arrives on a named barrier keeps its requests whole",
          "[counters]") {
  attn_test::DeviceBuf<uint32_t> out(128, "out");
  for (const char* schedule : {"forward", "reverse", "random:5", "greedy"}) {
    INFO(schedule);
    simt::set_schedule(simt::parse_schedule(schedule));
    const Report r = count([&] { counters_kernels::run_arrive_then_store(out.ptr); });
    simt::set_schedule({});
    const Counts c = at(r, kKernels, "the stores after bar.arrive");
    CHECK(c.gst_requests == 4);
    CHECK(c.gst_sectors == 16);
  }
}

// A float atomicAdd is a compare-and-swap loop on the CPU, retried while another worker thread's
// block updates the same word; the counters see one load and one store however often it retries
// (one pass of the loop: not ncu's view, which counts a reduction, `_op_red`, instead), so the
// counts are the same with one worker and with four.
TEST_CASE("counters: float atomicAdd counts the same under every number of worker threads",
          "[counters]") {
  constexpr int kBlocks = 64, kTimes = 200;
  for (const char* workers : {"1", "4"}) {
    INFO("SIMT_WORKERS=" << workers);
    attn_test::DeviceBuf<float> out(32, "out");
    std::fill(out.ptr, out.ptr + 32, 0.0f);
    const Report r = [&] {
      const attn_test::ScopedEnv env("SIMT_WORKERS", workers);
      return count([&] { counters_kernels::run_atomic_adds(out.ptr, kBlocks, kTimes); });
    }();
    for (int l = 0; l < 32; ++l) REQUIRE(out.ptr[l] == float(kBlocks * kTimes));
    const Counts& c = r.total;  // the kernel's only global accesses are its atomics
    CHECK(c.gld_requests == uint64_t(kBlocks * kTimes));
    CHECK(c.gld_sectors == uint64_t(4 * kBlocks * kTimes));  // 32 floats: 4 sectors
    CHECK(c.gst_requests == uint64_t(kBlocks * kTimes));
    CHECK(c.gst_sectors == uint64_t(4 * kBlocks * kTimes));
  }
}

// PTX ISA, "cp.async": each thread copies 16 bytes; the global side is a request like a load's,
// the shared side 16-byte writes (quarter warps).
TEST_CASE("counters: cp.async: its global sectors and its shared writes", "[counters]") {
  attn_test::DeviceBuf<unsigned char> in(8192, "in");
  attn_test::DeviceBuf<uint32_t> out(32, "out");
  for (const auto& [stride, sectors] : std::vector<std::pair<int, uint64_t>>{{16, 16}, {64, 32}}) {
    const Report r = count([&] { counters_kernels::run_cp_async(in.ptr, stride, out.ptr); });
    INFO("stride " << stride);
    CHECK(r.total.ldgsts_requests == 1);
    CHECK(r.total.ldgsts_sectors == sectors);
    CHECK(r.total.ldgsts_bytes == 512);
    CHECK(r.total.ldgsts_wavefronts == 4);
    CHECK(r.total.ldgsts_conflicts() == 0);
  }
}

// ---- The steps' budgets, in counts ------------------------------------------------------------

namespace {

const attn::StepInfo& step_named(const std::string& name) {
  static const std::vector<attn::StepInfo> steps = attn_test::kernel_steps();
  for (const auto& s : steps)
    if (s.name == name) return s;
  throw std::runtime_error("no step " + name);
}

// The counted run of `fn` (a step's counted copy, or a planted one) on p.
Report counted(attn::StepFn fn, const attn::Problem& p, const std::string& variant = "") {
  REQUIRE(fn != nullptr);
  auto be = attn::make_cpu_backend();
  const attn::DeviceProblem dev(*be, p, attn::make_inputs(p));
  attn::RunContext ctx(*be);
  ctx.variant = variant;
  return count([&] { fn(dev.params(), ctx); });
}

uint64_t distinct_bytes(const Report& r) {
  uint64_t n = 0;
  for (const auto& b : r.buffers) n += b.distinct;
  return n;
}

// Bytes of Q, K, V and O (16-bit) and LSE (fp32).
uint64_t qkvo_lse_bytes(const attn::Problem& p) {
  return uint64_t(2 * (2 * p.q_elements() + 2 * p.kv_elements()) + 4 * p.lse_elements());
}

}  // namespace

// At D = 80 and 96 a row of a tile is 10 or 12 chunks of 16 bytes, 8 in the first 64-column block
// and the rest in a second one. The copy gives a row's chunks to consecutive threads, so a quarter
// warp writes into both blocks, whose swizzled chunks meet in the same banks: 2-way conflicts on
// some of the cp.async writes (the chapter of step 4 says so). Counted at this shape, the budget
// that must not grow. The ldmatrix reads stay conflict-free.
TEST_CASE("steps 4 and 5 read their tiles with no bank conflicts, at every head dim",
          "[counters][budget]") {
  const std::map<int, uint64_t> cp_async_conflicts = {{64, 0}, {80, 2400}, {96, 1600}, {128, 0}};
  for (int dim : {64, 80, 96, 128}) {
    const attn::Problem p = attn_test::make(1, 2, 1, 130, 200, dim, attn::DType::fp16, true);
    for (const auto& [name, variant] : std::vector<std::pair<std::string, std::string>>{
             {"step4_tensorcore", ""}, {"step5_warpspecialized", "sm80"}}) {
      const Report r = counted(step_named(name).counted, p, variant);
      INFO(name << " " << variant << " D " << dim);
      CHECK(r.total.ldsm_inst > 0);
      CHECK(r.total.ldsm_conflicts() == 0);
      CHECK(r.total.ldgsts_requests > 0);
      CHECK(r.total.ldgsts_conflicts() == cp_async_conflicts.at(dim));
      CHECK(r.total.lds_conflicts() + r.total.sts_conflicts() == 0);
    }
  }
}

// The padding makes a row D + 8 elements long: reads down a column of rows meet distinct banks.
// The 16-byte stores of the tile load (load_rows_16B) are conflict-free where a row is a multiple
// of 128 bytes plus 16 (D = 64, 128); at D = 80 and 96 a quarter warp's eight chunks span two rows
// whose offsets meet in the same banks: counted at this shape, the budget that must not grow.
TEST_CASE("step 2's padded tiles are read with no bank conflicts", "[counters][budget]") {
  const std::map<int, uint64_t> store_conflicts = {{64, 0}, {80, 2304}, {96, 1536}, {128, 0}};
  for (int dim : {64, 80, 96, 128}) {
    const attn::Problem p = attn_test::make(1, 2, 2, 100, 100, dim, attn::DType::bf16, false);
    const Report r = counted(step_named("step2_tiled").counted, p);
    INFO("D " << dim);
    CHECK(r.total.lds_inst > 0);
    CHECK(r.total.lds_conflicts() == 0);
    CHECK(r.total.sts_conflicts() == store_conflicts.at(dim));
  }
}

TEST_CASE("tile loads use every byte of the sectors they fetch", "[counters][budget]") {
  // Every line that loads a tile: load_rows_16B (steps 2 and 3), cp.async (steps 4 and 5 sm80),
  // TMA (step 5 sm90a): bytes asked = 32 x sectors.
  const attn::Problem p = attn_test::make(1, 2, 1, 150, 190, 96, attn::DType::fp16, true);
  for (const auto& [name, variant] :
       std::vector<std::pair<std::string, std::string>>{{"step2_tiled", ""},
                                                        {"step3_fused", ""},
                                                        {"step4_tensorcore", ""},
                                                        {"step5_warpspecialized", "sm80"},
                                                        {"step5_warpspecialized", "sm90a"}}) {
    const Report r = counted(step_named(name).counted, p, variant);
    INFO(name << " " << variant);
    if (variant == "sm90a") {
      CHECK(r.total.tma_copies > 0);
      // A TMA box fetches its elements inside the tensor, rows of D elements: whole sectors.
      CHECK(r.total.tma_sectors * 32 <= r.total.tma_bytes);
    } else if (name == "step2_tiled" || name == "step3_fused") {
      const Counts c = at(r, "common/tiles.h", "data = *reinterpret_cast<const uint4*>");
      CHECK(c.gld_requests > 0);
      CHECK(c.gld_bytes == 32 * c.gld_sectors);
    } else {
      CHECK(r.total.ldgsts_requests > 0);
      CHECK(r.total.ldgsts_bytes == 32 * r.total.ldgsts_sectors);
    }
  }
}

TEST_CASE("steps 3-5 touch only Q, K, V, O and LSE; steps 1 and 2 add S/P, Sq x Sk floats",
          "[counters][budget]") {
  for (int seq : {96, 192}) {
    const attn::Problem p = attn_test::make(1, 2, 2, seq, seq, 64, attn::DType::fp16, false);
    const uint64_t base = qkvo_lse_bytes(p), sp = uint64_t(2) * seq * seq * 4;
    for (const auto& [name, variant] :
         std::vector<std::pair<std::string, std::string>>{{"step1_naive", ""},
                                                          {"step2_tiled", ""},
                                                          {"step3_fused", ""},
                                                          {"step4_tensorcore", ""},
                                                          {"step5_warpspecialized", "sm80"},
                                                          {"step5_warpspecialized", "sm90a"}}) {
      const Report r = counted(step_named(name).counted, p, variant);
      const bool unfused = name == "step1_naive" || name == "step2_tiled";
      INFO(name << " " << variant << " S " << seq);
      CHECK(distinct_bytes(r) == base + (unfused ? sp : 0));
    }
  }
}

// The planted layouts: the same kernels with the swizzle (step 4) or the padding (step 2) gone,
// on both sides (writer and reader agree, the results are right), report the conflicts at the
// lines that read the tiles.
TEST_CASE("step 4 without its swizzle: bank conflicts at its ldmatrix lines",
          "[counters][planted]") {
  const attn::Problem p = attn_test::make(1, 2, 1, 128, 128, 64, attn::DType::bf16, false);
  const Report ok = counted(step_named("step4_tensorcore").counted, p);
  const Report bad = counted(&step4_unswizzled::cpu::run, p);
  CHECK(ok.total.ldsm_conflicts() == 0);
  CHECK(bad.total.ldsm_conflicts() > 0);
  const std::string file = "step4_tensorcore/attention.cu";
  for (const char* line :
       {"attn::ldmatrix<4>(q_frag[kc]", "attn::ldmatrix<4>(kb,", "attn::ldmatrix<4, true>(vb,"}) {
    INFO(line);
    CHECK(at(bad, file, line).ldsm_conflicts() > 0);
  }
}

TEST_CASE("step 2 without its padding: bank conflicts at its shared reads", "[counters][planted]") {
  const attn::Problem p = attn_test::make(1, 2, 2, 96, 96, 64, attn::DType::bf16, false);
  const Report bad = counted(&step2_unpadded::cpu::run, p);
  CHECK(bad.total.lds_conflicts() > 0);
  const Counts c =
      at(bad, "step2_tiled/attention.cu", "dot += attn::to_float(Qs[r * (D + kPad) + d])");
  CHECK(c.lds_conflicts() > 0);
}

// Rungs 5.7 on give each block several query tiles, from a static order or (causal, 5.8 on) a
// counter. Each tile taken once loads its Q once, as rung 5.6 does with a block per tile: the
// count at the line of Q's TMA load is the same on any number of SMs. A tile taken twice loads
// its Q twice; one never taken, not at all.
TEST_CASE("step 5's persistent grids load each query tile's Q once, on any number of SMs",
          "[counters][budget]") {
  const std::string file = "step5_warpspecialized/attention_sm90a.cu";
  const std::string q_load = "attn::tma_load_3d(Qs + blk * Br * 64";
  for (const bool causal : {false, true}) {
    const attn::Problem p = attn_test::make(2, 3, 1, 300, 300, 64, attn::DType::bf16, causal);
    const uint64_t once =
        at(counted(&step5::rung6::counted::run, p), "step5_warpspecialized/rung6_budget.cu", q_load)
            .tma_copies;
    CHECK(once == 2 * 3 * 3);  // 3 query tiles of 128 rows for each of 6 heads, one box each
    for (const char* sms : {"1", "2", "5"}) {
      const attn_test::ScopedEnv env("SIMT_SMS", sms);
      INFO((causal ? "causal, " : "") << "SIMT_SMS=" << sms);
      CHECK(at(counted(&step5::rung7::counted::run, p), "step5_warpspecialized/rung7_persistent.cu",
               q_load)
                .tma_copies == once);
      CHECK(
          at(counted(&step5::rung8::counted::run, p), "step5_warpspecialized/rung8_lpt.cu", q_load)
              .tma_copies == once);
      CHECK(at(counted(&step5::rung9::counted::run, p), "step5_warpspecialized/rung9_shapes.cu",
               q_load)
                .tma_copies == once);
      CHECK(at(counted(&step5::counted::run_sm90a, p), file, q_load).tma_copies == once);
      // The planted copy takes the grid's first items again from the counter (causal only).
      const uint64_t planted =
          at(counted(&step5_twice::cpu::run_sm90a, p), file, q_load).tma_copies;
      CHECK(planted == (causal ? once + std::min<uint64_t>(once, std::stoul(sms)) : once));
    }
  }
}

// Rung 5.10 splits a query tile's keys into parts, a block each, when the query tiles leave SMs
// idle: each part loads its own key tiles, so that every key tile is still loaded once per query
// tile, in as many parts as the SMs make (the count at the line of K's TMA load is rung 5.9's,
// which never splits). A part given too few tiles leaves the last ones to nobody.
TEST_CASE("step 5's split loads each key tile once per query tile, in any number of parts",
          "[counters][budget]") {
  const std::string k_load = "attn::tma_load_3d(k_slot + blk * Bc * 64";
  for (const bool causal : {false, true}) {
    // 2 query tiles x 2 heads; 1000 keys, 6 tiles of 192 (the first query tile, causal: 5).
    const attn::Problem p = attn_test::make(1, 2, 1, 200, 1000, 64, attn::DType::bf16, causal);
    const uint64_t once =
        at(counted(&step5::rung9::counted::run, p), "step5_warpspecialized/rung9_shapes.cu", k_load)
            .tma_copies;
    CHECK(once == 2 * (causal ? 11 : 12));  // one box each at D = 64
    const std::pair<const char*, int> parts[] = {{"1", 1}, {"16", 4}, {"20", 5}, {"132", 6}};
    for (const auto& [sms, splits] : parts) {
      const attn_test::ScopedEnv env("SIMT_SMS", sms);
      INFO((causal ? "causal, " : "") << "SIMT_SMS=" << sms);
      const std::string file = "step5_warpspecialized/attention_sm90a.cu";
      CHECK(at(counted(&step5::counted::run_sm90a, p), file, k_load).tma_copies == once);
      // The planted copy: a query tile's n key tiles in parts of n / splits (rounded down), the
      // n % splits past them never loaded, in each of the two heads.
      const uint64_t lost = 2 * uint64_t((causal ? 5 : 6) % splits + 6 % splits);
      CHECK(at(counted(&step5_lost::cpu::run_sm90a, p), file, k_load).tma_copies == once - lost);
    }
  }
}

// Rung 5.11 packs a GQA group's query heads into one tile when that saves a tenth of the tiles:
// the tile's K/V tiles are loaded once for the whole group, where rung 5.10 loads them once per
// head.
TEST_CASE("step 5's packed tile loads each K/V tile once for its GQA group", "[counters][budget]") {
  const std::string q_load = "attn::tma_load_3d(Qs + blk * Br * 64";
  const std::string k_load = "attn::tma_load_3d(k_slot + blk * Bc * 64";
  const std::string file = "step5_warpspecialized/attention_sm90a.cu";
  const std::string rung10 = "step5_warpspecialized/rung10_split.cu";
  // On 132 SMs, where both split each query tile's keys into 3 parts of one key tile.
  const attn_test::ScopedEnv sms("SIMT_SMS", "132");
  for (const bool causal : {false, true}) {
    INFO((causal ? "causal" : "no mask"));
    // 8 query heads of one K/V head, 16 rows each; 400 keys, 3 tiles of 192: 5.10 runs 8 query
    // tiles of one head each, 5.11 one of the 8 heads.
    const attn::Problem p = attn_test::make(1, 8, 1, 16, 400, 64, attn::DType::bf16, causal);
    const Report per_head = counted(&step5::rung10::counted::run, p);
    const Report packed = counted(&step5::counted::run_sm90a, p);
    // A part loads its query tile's Q (one box: 128 rows of a head, or 16 rows of each of 8
    // heads) and its key tile.
    CHECK(at(per_head, rung10, q_load).tma_copies == 8 * 3);
    CHECK(at(per_head, rung10, k_load).tma_copies == 8 * 3);
    CHECK(at(packed, file, q_load).tma_copies == 3);
    CHECK(at(packed, file, k_load).tma_copies == 3);
  }
}
