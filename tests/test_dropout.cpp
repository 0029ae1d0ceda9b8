// Dropout: counter-based, deterministic, keyed by (seed, b, h, i, j).
#include <catch2/catch.hpp>

#include <Random123/philox.h>
#include <Random123/uniform.hpp>

#include <cstring>
#include <random>

#include "common/dropout.h"

TEST_CASE("Philox4x32-10 known answer (Random123's test vector)", "[dropout]") {
  r123::Philox4x32 rng;
  const auto out = rng({{0, 0, 0, 0}}, {{0, 0}});
  CHECK(out[0] == 0x6627e8d5u);
  CHECK(out[1] == 0xe169c58du);
  CHECK(out[2] == 0xbc57ac4cu);
  CHECK(out[3] == 0x9b00dbd8u);
  const attn::PhiloxWords ours = attn::philox4x32_10({{0, 0, 0, 0}}, 0, 0);
  for (int w = 0; w < 4; ++w) CHECK(ours.v[w] == out[w]);
}

TEST_CASE("the project's Philox4x32-10 is Random123's, word for word", "[dropout]") {
  // common/philox.h is written from the generator's definition; Random123 is the authors' code.
  std::mt19937_64 gen(20111112);
  r123::Philox4x32 rng;
  for (int n = 0; n < 100000; ++n) {
    const uint64_t a = gen(), b = gen(), key = gen();
    const r123::Philox4x32::ctr_type ctr = {
        {uint32_t(a), uint32_t(a >> 32), uint32_t(b), uint32_t(b >> 32)}};
    const auto theirs = rng(ctr, {{uint32_t(key), uint32_t(key >> 32)}});
    const attn::PhiloxWords ours =
        attn::philox4x32_10({{ctr[0], ctr[1], ctr[2], ctr[3]}}, uint32_t(key), uint32_t(key >> 32));
    for (int w = 0; w < 4; ++w) REQUIRE(ours.v[w] == theirs[w]);
  }
}

TEST_CASE("the project's uniform_pm1 is Random123's uneg11<float>, bit for bit", "[dropout]") {
  // make_inputs draws Q, K and V with it (common/tensors.cpp): the inputs every result and table
  // of the repository was made with. The words near zero and the ends, then a million more.
  auto same = [](uint32_t word) {
    const float ours = attn::uniform_pm1(word), theirs = r123::uneg11<float>(word);
    return std::memcmp(&ours, &theirs, sizeof ours) == 0;
  };
  for (uint32_t w = 0; w < 4096; ++w) {
    for (uint32_t word : {w, 0u - w, 0x7FFFFFFFu - w, 0x80000000u + w}) {
      INFO(word);
      REQUIRE(same(word));
    }
  }
  std::mt19937 gen(20261127);
  for (int n = 0; n < 1000000; ++n) {
    const uint32_t word = static_cast<uint32_t>(gen());
    INFO(word);
    REQUIRE(same(word));
  }
}

TEST_CASE("dropout mask is a pure function of (seed, b, h, i, j)", "[dropout]") {
  const attn::Dropout d = attn::make_dropout(0.25f, 1234);
  const attn::Dropout same = attn::make_dropout(0.25f, 1234);
  const attn::Dropout other = attn::make_dropout(0.25f, 1235);
  int differ = 0;
  for (int j = 0; j < 1000; ++j) {
    CHECK(attn::dropout_keep(d, 1, 2, 3, j) == attn::dropout_keep(same, 1, 2, 3, j));
    differ += attn::dropout_keep(d, 1, 2, 3, j) != attn::dropout_keep(other, 1, 2, 3, j);
  }
  CHECK(differ > 100);
  // Each coordinate matters.
  int by_coord[4] = {0, 0, 0, 0};
  for (int j = 0; j < 400; ++j) {
    const bool k = attn::dropout_keep(d, 0, 0, 0, j);
    by_coord[0] += k != attn::dropout_keep(d, 1, 0, 0, j);
    by_coord[1] += k != attn::dropout_keep(d, 0, 1, 0, j);
    by_coord[2] += k != attn::dropout_keep(d, 0, 0, 1, j);
    by_coord[3] += k != attn::dropout_keep(d, 0, 0, 0, j + 1);
  }
  for (int c : by_coord) CHECK(c > 40);
}

TEST_CASE("dropout keeps 1 - p of the elements and scales them by 1 / (1 - p)", "[dropout]") {
  for (float p : {0.1f, 0.5f, 0.9f}) {
    const attn::Dropout d = attn::make_dropout(p, 7);
    int kept = 0;
    const int n = 200000;
    for (int j = 0; j < n; ++j) kept += attn::dropout_keep(d, 0, 0, j / 1000, j % 1000);
    CHECK(kept / double(n) == Approx(1.0 - p).margin(0.005));
    CHECK(attn::dropout_factor(d, 0, 0, 0, 0) * (1.0f - p) ==
          Approx(attn::dropout_keep(d, 0, 0, 0, 0) ? 1.0f : 0.0f));
  }
  const attn::Dropout off = attn::make_dropout(0.0f, 7);
  CHECK_FALSE(off.enabled);
  CHECK(attn::dropout_factor(off, 0, 0, 0, 0) == 1.0f);
}

namespace {
// The documented layout (common/dropout.h), written out here independently of the project's
// helpers: Philox4x32-10 keyed by (seed low word, seed high word), counter (j / 4, i, h, b), and
// element (b, h, i, j) uses output word j % 4.
uint32_t documented_word(uint64_t seed, int b, int h, int i, int j) {
  philox4x32_ctr_t ctr = {{static_cast<uint32_t>(j) / 4, static_cast<uint32_t>(i),
                           static_cast<uint32_t>(h), static_cast<uint32_t>(b)}};
  philox4x32_key_t key = {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  return philox4x32(ctr, key).v[j % 4];
}

// Whether the project's dropout keeps (b, h, i, j) when the threshold is exactly `threshold`.
bool keeps(uint64_t seed, uint32_t threshold, int b, int h, int i, int j) {
  const attn::Dropout d{threshold, 2.0f, seed, true};
  return attn::dropout_keep(d, b, h, i, j);
}
}  // namespace

TEST_CASE("dropout follows the documented Philox counter layout (known answers)", "[dropout]") {
  // Known answers: the selected 32-bit word of a few elements, computed once with Random123's
  // philox4x32 (whose own test vector is checked above) from the layout above. Each is pinned by
  // the threshold at which the element flips from kept to dropped.
  const uint64_t seed = 0x0123456789abcdefull;
  struct Known {
    int b, h, i, j;
    uint32_t word;
  };
  const Known known[] = {{0, 0, 0, 0, 0xb850222eu},
                         {1, 2, 3, 5, 0xb711825cu},
                         {3, 1, 999, 1000, 0x99370950u},
                         {0, 7, 17, 130, 0xb0889cb5u}};
  for (const Known& k : known) {
    INFO("(b, h, i, j) = (" << k.b << ", " << k.h << ", " << k.i << ", " << k.j << ")");
    CHECK(documented_word(seed, k.b, k.h, k.i, k.j) == k.word);
    CHECK(keeps(seed, k.word, k.b, k.h, k.i, k.j));
    CHECK_FALSE(keeps(seed, k.word + 1, k.b, k.h, k.i, k.j));
  }
  // And over a grid with distinct, asymmetric coordinates (a swap of any two counter words, or of
  // the key words, changes the words drawn): keep iff the documented word >= threshold.
  const uint32_t threshold = 0x80000000u;
  for (uint64_t s : {uint64_t(7), uint64_t(0xfedcba9800000001ull)})
    for (int b = 0; b < 3; ++b)
      for (int h = 0; h < 3; ++h)
        for (int i = 0; i < 9; i += 4)
          for (int j = 0; j < 40; ++j) {
            INFO("seed " << s << " (b, h, i, j) = (" << b << ", " << h << ", " << i << ", " << j
                         << ")");
            REQUIRE(keeps(s, threshold, b, h, i, j) ==
                    (documented_word(s, b, h, i, j) >= threshold));
          }
}
