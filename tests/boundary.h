// Tile-boundary shapes: problems whose rows end exactly at, one before and one after a multiple of
// a kernel's tile width, derived from the tile the kernel reports it ran with (RunContext::tile).
// A kernel that gets its tile count or its unmasked-tile count off by one leaks or loses one key
// only on such a row; the random shapes of the matrix (tests/matrix.h) rarely put one there.
//
// One leaked or lost key among the n a row sees moves O by about |v_j - O| / n: with the usual
// inputs (0.5 + U(-1, 1)) that is below bf16's tolerance for the longer rows. So the keys next to a
// tile boundary (j mod Bc in Bc - 2 .. 1) are made to matter: their K is 1.5 in every column, a
// score about 4 (D = 64) to 6 (D = 128) above the others', so that each carries a tenth of a
// 500-key row's weight and most of a short row's. One of them leaked or lost moves O by about
// 0.1, ten times the bf16 bound, while V stays as usual, so that the rounding of P costs no more
// than in the matrix.
#pragma once

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/check.h"
#include "common/harness.h"
#include "common/reference.h"
#include "common/simt/launch.h"
#include "common/simt/runtime.h"
#include "common/tensors.h"
#include "tests/matrix.h"

namespace attn_test {

// The tile a step's CPU kernel runs with for this head dim and dropout (0, 0 for none).
inline attn::RunContext::Tile tile_of(const attn::StepInfo& step, const std::string& variant,
                                      const std::string& config, int dim, float dropout) {
  attn::Problem p = make(1, 1, 1, 1, 1, dim, attn::DType::bf16, false, {}, dropout);
  auto be = attn::make_cpu_backend();
  const attn::DeviceProblem dev(*be, p, attn::make_inputs(p));
  attn::RunContext ctx(*be);
  ctx.variant = variant;
  ctx.config = config;
  // A backward step's tensors besides (one row: dO, dQ, dK and dV alike), zeroed: only the tile
  // it reports is wanted.
  std::vector<void*> grads;
  for (int t = 0; step.backward && t < 4; ++t) {
    grads.push_back(be->alloc(size_t(dim) * sizeof(attn::Bits16), "a backward tensor"));
    be->upload(grads.back(), std::vector<attn::Bits16>(size_t(dim)).data(),
               size_t(dim) * sizeof(attn::Bits16));
  }
  const attn::RunContext::BackwardTensors bt =
      step.backward ? attn::RunContext::BackwardTensors{grads[0], grads[1], grads[2], grads[3]}
                    : attn::RunContext::BackwardTensors{};
  if (step.backward) ctx.backward = &bt;
  step.cpu(dev.params(), ctx);
  for (void* g : grads) be->release(g);
  return ctx.tile;
}

// Per-batch (query, key) lengths, one batch each, as one problem (padded to the longest).
inline attn::Problem batches(const std::vector<std::pair<int, int>>& lengths, int dim, bool causal,
                             float dropout) {
  std::vector<int> lq, lk;
  for (const auto& [q, k] : lengths) lq.push_back(q), lk.push_back(k);
  const int sq = *std::max_element(lq.begin(), lq.end());
  const int sk = *std::max_element(lk.begin(), lk.end());
  attn::Problem p = make(int(lengths.size()), 1, 1, sq, sk, dim, attn::DType::bf16, causal,
                         std::move(lk), dropout);
  p.seqlens_q = std::move(lq);
  return p;
}

// For a kernel with Br query rows per block and Bc keys per tile, k = 1, 2 and delta = -1, 0, 1:
// causal: the first row of the second block, and the last row of the first, see k Bc + delta keys
//   (query length 2 Br, key length Br + k Bc + delta - 1 and Br + k Bc + delta: Sq != Sk), the
//   first row of the first block does (query length Br + 1), and Sq = Sk = 2 Br + 1 puts the
//   diagonal on every row;
// not causal: every row sees k Bc + delta keys, the last block has Br - 1, Br or Br + 1 rows.
// A kernel whose main loop runs its unmasked tiles `stages` at a time (steps 4 and 5) reaches it
// only with a row that sees stages tiles: the first row of the second block then sees stages Bc - 1
// keys too, so that a key one unmasked tile too many leaks is a real key of the block (a batch's
// padding keys load as zeros, whose leak would move LSE by less than its tolerance).
// The longest key length is the tensor's own, so that the last tile is also the zero-filled one.
inline std::vector<attn::Problem> boundary_problems(const attn::RunContext::Tile& tile, int dim,
                                                    float dropout) {
  const int Br = tile.rows, Bc = tile.keys;
  std::vector<std::pair<int, int>> causal, full;
  for (int k = 1; k <= 2; ++k)
    for (int delta = -1; delta <= 1; ++delta) {
      const int end = k * Bc + delta;
      causal.push_back({2 * Br, Br + end - 1});
      causal.push_back({2 * Br, Br + end});
      causal.push_back({Br + 1, Br + end});
      full.push_back({Br + delta, end});
    }
  if (tile.stages > 2) causal.push_back({2 * Br, Br + tile.stages * Bc - 2});
  causal.push_back({2 * Br + 1, 2 * Br + 1});
  return {batches(causal, dim, true, dropout), batches(full, dim, false, dropout)};
}

// The inputs of a boundary problem for tiles of Bc keys: K = 1.5 on the keys next to a tile
// boundary (see above), the usual inputs elsewhere.
inline attn::HostInputs boundary_inputs(const attn::Problem& p, int Bc) {
  attn::HostInputs in = attn::make_inputs(p);
  for (size_t x = 0; x < in.k.size(); ++x)
    if ((int(x / size_t(p.dim) % size_t(p.seqlen_k)) + 2) % Bc < 4)
      in.k[x] = attn::to_bits(1.5f, p.dtype);
  return in;
}

// boundary_inputs(p, Bc) and their FP64 reference, made once per problem and tile width and kept
// for the process: every kernel of that tile, under each schedule, is checked against the same.
struct BoundaryCase {
  attn::HostInputs inputs;
  attn::Reference reference;
};
inline const BoundaryCase& boundary_case(const attn::Problem& p, int Bc) {
  static std::map<std::string, BoundaryCase> made;
  std::ostringstream key;  // every field of the problem, and the tile width
  key << p.batch << ' ' << p.heads << ' ' << p.heads_kv << ' ' << p.seqlen_q << ' ' << p.seqlen_k
      << ' ' << p.dim << ' ' << int(p.dtype) << ' ' << p.causal << ' ' << p.dropout << ' ' << p.seed
      << ' ' << p.scale.value_or(0.0f) << ' ' << p.scale.has_value() << ' ' << Bc;
  for (const std::vector<int>* lengths : {&p.seqlens_k, &p.seqlens_q}) {
    key << " |";
    for (int n : *lengths) key << ' ' << n;
  }
  auto [it, fresh] = made.try_emplace(key.str());
  if (fresh) {
    it->second.inputs = boundary_inputs(p, Bc);
    it->second.reference = attn::reference_attention(p, it->second.inputs);
  }
  return it->second;
}

// Runs the step's CPU kernel on p with boundary_inputs(p, Bc) under `schedule`: "" when O and
// LSE pass the check against the FP64 reference, else the report (the check's first failure, or
// the kernel's error).
inline std::string run_boundary(const attn::StepInfo& step, const std::string& variant,
                                const std::string& config, const attn::Problem& p, int Bc,
                                const std::string& schedule) {
  const BoundaryCase& c = boundary_case(p, Bc);
  const attn::HostInputs& in = c.inputs;
  auto be = attn::make_cpu_backend();
  const attn::DeviceProblem dev(*be, p, in);
  attn::RunContext ctx(*be);
  ctx.variant = variant;
  ctx.config = config;
  simt::set_schedule(simt::parse_schedule(schedule));
  try {
    step.cpu(dev.params(), ctx);
  } catch (const simt::KernelError& e) {
    simt::set_schedule(simt::Schedule{});
    return e.what();
  }
  simt::set_schedule(simt::Schedule{});
  std::vector<attn::Bits16> o;
  std::vector<float> lse;
  dev.download(o, lse);
  const attn::CheckResult r = attn::check_outputs(p, o, lse, c.reference);
  return r.passed ? "" : r.first_failure;
}

}  // namespace attn_test
