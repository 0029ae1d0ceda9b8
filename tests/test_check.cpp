// The correctness gate must fail loudly: a perturbed output, a NaN, an unwritten element.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "common/check.h"

using attn::Problem;

namespace {

struct Fixture {
  Problem p;
  attn::Reference ref;
  std::vector<attn::Bits16> o;
  std::vector<float> lse;

  explicit Fixture(attn::DType t) {
    p.batch = 1;
    p.heads = 2;
    p.seqlen_q = p.seqlen_k = 33;
    p.dim = 16;
    p.dtype = t;
    p.causal = true;
    ref = attn::reference_attention(p, attn::make_inputs(p));
    for (double x : ref.o) o.push_back(attn::to_bits(static_cast<float>(x), t));
    for (double x : ref.lse) lse.push_back(static_cast<float>(x));
  }
  attn::CheckResult check() const { return attn::check_outputs(p, o, lse, ref); }
};

}  // namespace

TEST_CASE("gate: the reference rounded to the dtype passes", "[check]") {
  for (auto t : {attn::DType::fp16, attn::DType::bf16}) {
    const Fixture f(t);
    const auto r = f.check();
    CHECK(r.passed);
    CHECK(r.first_failure.empty());
  }
}

TEST_CASE("gate: one perturbed element fails", "[check]") {
  Fixture f(attn::DType::fp16);
  f.o[100] = attn::to_bits(attn::from_bits(f.o[100], f.p.dtype) + 0.01f, f.p.dtype);
  const auto r = f.check();
  CHECK_FALSE(r.passed);
  CHECK(r.bad_o == 1);
  CHECK_THAT(r.first_failure, Catch::Contains("O[b=0,h=0,i=6,d=4]"));
}

TEST_CASE("gate: bf16 has a looser but finite bound", "[check]") {
  Fixture f(attn::DType::bf16);
  f.o[5] = attn::to_bits(attn::from_bits(f.o[5], f.p.dtype) + 0.05f, f.p.dtype);
  CHECK_FALSE(f.check().passed);
}

TEST_CASE("gate: NaN never passes", "[check]") {
  Fixture f(attn::DType::fp16);
  f.o[7] = 0x7E00;  // fp16 quiet NaN
  CHECK_FALSE(f.check().passed);
  Fixture g(attn::DType::fp16);
  g.lse[3] = NAN;
  CHECK_FALSE(g.check().passed);
}

TEST_CASE("gate: an unwritten element is named as such", "[check]") {
  Fixture f(attn::DType::fp16);
  std::memset(&f.o[42], attn::kPoisonByte, sizeof f.o[42]);
  auto r = f.check();
  CHECK_FALSE(r.passed);
  CHECK(r.unwritten == 1);
  CHECK(r.unwritten_o == 1);  // the report says which output was left unwritten
  CHECK(r.unwritten_lse == 0);
  CHECK_THAT(r.first_failure, Catch::Contains("never written"));
  Fixture g(attn::DType::bf16);
  std::memset(&g.lse[2], attn::kPoisonByte, sizeof g.lse[2]);
  r = g.check();
  CHECK(r.unwritten == 1);
  CHECK(r.unwritten_o == 0);
  CHECK(r.unwritten_lse == 1);
}

TEST_CASE("gate: -inf LSE must stay -inf, and a finite LSE must be close", "[check]") {
  Fixture f(attn::DType::fp16);
  f.p.seqlens_k = {0};  // every row sees no key: reference O = 0, LSE = -inf
  f.ref = attn::reference_attention(f.p, attn::make_inputs(f.p));
  std::fill(f.o.begin(), f.o.end(), attn::to_bits(0.0f, f.p.dtype));
  std::fill(f.lse.begin(), f.lse.end(), -INFINITY);
  CHECK(f.check().passed);
  f.lse[0] = 0.0f;
  CHECK_FALSE(f.check().passed);
  Fixture g(attn::DType::fp16);
  g.lse[1] += 0.01f;
  CHECK_FALSE(g.check().passed);
}
