// Problem validation, the FLOP count and the masking rule.
#include <catch2/catch.hpp>

#include "common/problem.h"

using attn::Problem;

namespace {
Problem small() {
  Problem p;
  p.batch = 2;
  p.heads = 4;
  p.seqlen_q = p.seqlen_k = 16;
  p.dim = 64;
  return p;
}
}  // namespace

TEST_CASE("a valid problem passes validation", "[problem]") {
  CHECK(attn::validate(small()).empty());
}

TEST_CASE("each invalid input is rejected with a message naming its flag", "[problem]") {
  struct Case {
    const char* name;
    void (*mutate)(Problem&);
    const char* expect;
  };
  const Case cases[] = {
      {"dim 0", [](Problem& p) { p.dim = 0; }, "--dim 0"},
      {"dim 257", [](Problem& p) { p.dim = 257; }, "--dim 257"},
      {"batch 0", [](Problem& p) { p.batch = 0; }, "--batch 0"},
      {"heads -1", [](Problem& p) { p.heads = -1; }, "--heads -1"},
      {"seqlen_q 0", [](Problem& p) { p.seqlen_q = 0; }, "--seqlen-q 0"},
      {"seqlen_k 0", [](Problem& p) { p.seqlen_k = 0; }, "--seqlen-k 0"},
      {"GQA 6/4", [](Problem& p) { p.heads = 6, p.heads_kv = 4; }, "--heads 6 --heads-kv 4"},
      {"dropout 1.5", [](Problem& p) { p.dropout = 1.5f; }, "--dropout 1.5"},
      {"dropout 1", [](Problem& p) { p.dropout = 1.0f; }, "--dropout 1"},
      {"dropout -0.1", [](Problem& p) { p.dropout = -0.1f; }, "--dropout -0.1"},
      {"scale inf", [](Problem& p) { p.scale = INFINITY; }, "--scale"},
      {"seqlens count", [](Problem& p) { p.seqlens_k = {3}; }, "expected 2 key lengths"},
      {"seqlens range",
       [](Problem& p) {
         p.seqlens_k = {3, 17};
       },
       "--seqlens-k 17"},
      {"query lengths count",
       [](Problem& p) {
         p.seqlens_q = {3, 4, 5};
       },
       "expected 2 query lengths"},
      {"query lengths range",
       [](Problem& p) {
         p.seqlens_q = {0, 17};
       },
       "--seqlens-q 17"},
      {"too large", [](Problem& p) { p.heads = 8, p.seqlen_q = 1 << 20, p.dim = 256; },
       "too large"},
      {"grid", [](Problem& p) { p.batch = 1 << 14, p.heads = 8; }, "at most 65535"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Problem p = small();
    c.mutate(p);
    const std::string why = attn::validate(p);
    CHECK_THAT(why, Catch::Contains(c.expect));
    CHECK(why.find('\n') == std::string::npos);
  }
}

TEST_CASE("GQA: query heads map onto their key/value head", "[problem]") {
  attn::AttentionParams p{};
  p.heads = 8;
  p.heads_kv = 2;
  CHECK(attn::kv_head(p, 0) == 0);
  CHECK(attn::kv_head(p, 3) == 0);
  CHECK(attn::kv_head(p, 4) == 1);
  CHECK(attn::kv_head(p, 7) == 1);
}

TEST_CASE("causal masking is aligned bottom-right", "[problem]") {
  // Square: row i sees keys 0..i.
  CHECK(attn::visible_keys_end(0, 4, 4, true) == 1);
  CHECK(attn::visible_keys_end(3, 4, 4, true) == 4);
  // More keys than queries: the last query sees every key.
  CHECK(attn::visible_keys_end(1, 2, 5, true) == 5);
  CHECK(attn::visible_keys_end(0, 2, 5, true) == 4);
  // More queries than keys: the first rows see nothing.
  CHECK(attn::visible_keys_end(0, 5, 2, true) == 0);
  CHECK(attn::visible_keys_end(3, 5, 2, true) == 1);
  CHECK(attn::visible_keys_end(4, 5, 2, true) == 2);
  // Not causal: every key of the batch.
  CHECK(attn::visible_keys_end(0, 5, 2, false) == 2);
  CHECK(attn::visible_keys_end(0, 5, 0, false) == 0);
}

TEST_CASE("per-batch query lengths: padding rows see nothing, causal aligns per batch",
          "[problem]") {
  attn::AttentionParams a{};
  const int q_lens[] = {3, 0, 5}, k_lens[] = {5, 4, 2};
  a.seqlens_q = q_lens;
  a.seqlens_k = k_lens;
  a.seqlen_q = 8;
  a.seqlen_k = 6;
  a.causal = true;
  // Batch 0: 3 queries, 5 keys: rows see 3, 4, 5 keys (the diagonal ends at its own corner).
  CHECK(attn::row_keys_end(a, 0, 0) == 3);
  CHECK(attn::row_keys_end(a, 0, 2) == 5);
  CHECK(attn::row_keys_end(a, 0, 3) == 0);  // padding row
  CHECK(attn::row_keys_end(a, 1, 0) == 0);  // no queries at all
  // Batch 2: 5 queries, 2 keys: rows 0..2 see nothing, rows 3, 4 see 1, 2.
  CHECK(attn::row_keys_end(a, 2, 2) == 0);
  CHECK(attn::row_keys_end(a, 2, 4) == 2);
  // A tile's keys are those of its last real row; a tile of padding rows needs none.
  CHECK(attn::tile_keys_end(a, 0, 0, 64) == 5);
  CHECK(attn::tile_keys_end(a, 0, 0, 2) == 4);
  CHECK(attn::tile_keys_end(a, 0, 3, 64) == 0);
  CHECK(attn::tile_keys_end(a, 1, 0, 64) == 0);
  a.causal = false;
  CHECK(attn::row_keys_end(a, 0, 1) == 5);
  CHECK(attn::row_keys_end(a, 0, 4) == 0);
  // The host-side Problem agrees.
  Problem p;
  p.batch = 3;
  p.seqlen_q = 8;
  p.seqlen_k = 6;
  p.seqlens_q = {3, 0, 5};
  p.seqlens_k = {5, 4, 2};
  p.causal = true;
  p.heads = 1;
  p.dim = 1;
  CHECK(p.row_keys_end(2, 4) == 2);
  CHECK(p.visible_pairs() == (3 + 4 + 5) + 0 + (1 + 2));
}

TEST_CASE("FLOP count: 4 * D per visible (i, j) pair", "[problem][flops]") {
  Problem p = small();
  p.batch = 1;
  p.heads = 2;
  p.seqlen_q = p.seqlen_k = 8;
  p.dim = 64;
  CHECK(p.flops() == 4.0 * 64 * 2 * 8 * 8);
  p.causal = true;  // 8 * 9 / 2 = 36 visible pairs per head
  CHECK(p.flops() == 4.0 * 64 * 2 * 36);
  // The usual 4*B*H*S*S*D/2 for a long causal square (it counts the diagonal half, so it is
  // within S/S^2 of ours).
  p.seqlen_q = p.seqlen_k = 4096;
  CHECK(p.flops() == Approx(4.0 * 2 * 4096.0 * 4096 * 64 / 2).epsilon(1.0 / 4096 + 1e-12));
}

TEST_CASE("FLOP count with per-batch key lengths and Sq != Sk", "[problem][flops]") {
  Problem p = small();
  p.heads = 1;
  p.dim = 1;
  p.seqlen_q = 3;
  p.seqlen_k = 5;
  p.seqlens_k = {5, 0};
  CHECK(p.visible_pairs() == 3 * 5 + 0);
  p.causal = true;  // batch 0: rows see 3, 4, 5 keys
  CHECK(p.visible_pairs() == 3 + 4 + 5);
  p.seqlens_k = {2, 1};  // batch 0: Sq=3 > 2 keys: rows see 0, 1, 2; batch 1: 0, 0, 1
  CHECK(p.visible_pairs() == 3 + 1);
  CHECK(p.flops() == 4.0 * 4);
}
