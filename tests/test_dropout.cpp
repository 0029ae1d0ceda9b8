// Dropout: counter-based, deterministic, keyed by (seed, b, h, i, j).
#include <catch2/catch.hpp>

#include "common/dropout.h"

TEST_CASE("Philox4x32-10 known answer (Random123's test vector)", "[dropout]") {
  r123::Philox4x32 rng;
  const auto out = rng({{0, 0, 0, 0}}, {{0, 0}});
  CHECK(out[0] == 0x6627e8d5u);
  CHECK(out[1] == 0xe169c58du);
  CHECK(out[2] == 0xbc57ac4cu);
  CHECK(out[3] == 0x9b00dbd8u);
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
