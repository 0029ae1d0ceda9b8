// Step 0: the streaming implementation against the reference over the test matrix, and the
// invariant checker catching a broken state.
#include <catch2/catch.hpp>

#include "common/harness.h"
#include "step0_reference/streaming.h"
#include "tests/matrix.h"

TEST_CASE("step0 passes the test matrix", "[step0]") {
  const attn::StepInfo step{.name = "step0_reference", .cpu = &step0::streaming_attention};
  for (const attn::Problem& p : attn_test::matrix()) {
    attn::Options o;
    o.problem = p;
    o.iters = 0;  // the checked run alone
    o.warmup = 0;
    o.backend = "cpu";
    const attn::RunOutcome r = attn::run_step(step, o);
    INFO(p.describe() << "\n" << r.message << "\n" << r.row.check.first_failure);
    REQUIRE(r.exit_code == 0);
    REQUIRE(r.row.check.passed);
  }
}

TEST_CASE("step0 invariant check accepts a correct state and rejects a broken one", "[step0]") {
  const std::vector<float> s = {0.5f, 2.0f, -1.0f, 3.0f};
  const float v[4][2] = {{1, 0}, {0, 1}, {1, 1}, {2, -1}};
  auto fresh = [] { return step0::InvariantCheck{3.0, std::vector<double>(2)}; };

  step0::InvariantCheck check = fresh();
  auto st = online_softmax::init<float>();
  std::vector<float> acc(2, 0.0f);
  for (size_t j = 0; j < s.size(); ++j) {
    const float alpha = online_softmax::rescale_to(st, s[j]);
    for (float& a : acc) a *= alpha;
    const float pr = online_softmax::prob(st, s[j]);
    st.l += pr;
    for (int d = 0; d < 2; ++d) acc[d] += pr * v[j][d];
    check.add(s[j], 1.0, v[j]);
    CHECK_NOTHROW(check.verify(st, acc, 0, 0, 0, static_cast<int>(j) + 1));
  }
  // The classic bug: forgetting to rescale the accumulator when the maximum moves.
  auto bad = st;
  std::vector<float> bad_acc = acc;
  bad_acc[0] *= 1.5f;
  CHECK_THROWS_WITH(check.verify(bad, bad_acc, 1, 2, 3, 4), Catch::Contains("acc[0]"));
  bad.l *= 1.01f;
  CHECK_THROWS_WITH(check.verify(bad, acc, 1, 2, 3, 4), Catch::Contains("b=1 h=2 i=3"));
  bad = st;
  bad.m = 2.0f;
  CHECK_THROWS_WITH(check.verify(bad, acc, 0, 0, 0, 4), Catch::Contains("largest score"));
}
