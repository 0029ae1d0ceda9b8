// Every kernel step over the test matrix (tests/matrix.h), on the CPU SIMT backend under two
// fiber schedules, and on the GPU when one is present.
#include <catch2/catch.hpp>

#include "common/simt/launch.h"
#include "tests/matrix.h"
#include "tests/steps.h"

namespace {

void run_matrix(const attn::StepInfo& step, const std::string& backend,
                const std::string& schedule) {
  for (const attn::Problem& p : attn_test::matrix()) {
    if (!step.head_dims.empty() &&
        std::find(step.head_dims.begin(), step.head_dims.end(), p.dim) == step.head_dims.end())
      continue;
    attn::Options o;
    o.problem = p;
    o.iters = 1;
    o.warmup = 0;
    o.backend = backend;
    o.schedule = schedule;
    const attn::RunOutcome r = attn::run_step(step, o);
    INFO(step.name << " [" << backend << ", " << schedule << "] " << p.describe() << "\n"
                   << r.message << "\n"
                   << r.row.check.first_failure);
    REQUIRE(r.exit_code == 0);
    REQUIRE(r.row.checked);
    REQUIRE(r.row.check.passed);
    REQUIRE(r.row.backend == backend);
  }
}

const attn::StepInfo& step_named(const std::string& name) {
  static const std::vector<attn::StepInfo> steps = attn_test::kernel_steps();
  for (const auto& s : steps)
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
  TEST_CASE(NAME " passes the matrix on the GPU", "[gpu][" NAME "]") {                      \
    run_matrix(step_named(NAME), "gpu", "forward");                                         \
  }

STEP_MATRIX_TESTS("step1_naive")

TEST_CASE("step1 keeps S and P in global memory: its scratch is Sq x Sk floats", "[step1_naive]") {
  // The contrast the fused steps will draw: step1's only scratch buffer holds all of S.
  attn::Problem p = attn_test::make(2, 3, 3, 17, 29, 64, attn::DType::fp16, false);
  auto be = attn::make_cpu_backend();
  const attn::DeviceProblem dev(*be, p, attn::make_inputs(p));
  attn::RunContext ctx(*be);
  step_named("step1_naive").cpu(dev.params(), ctx);
  CHECK(ctx.scratch_bytes() == size_t(2) * 3 * 17 * 29 * sizeof(float));
}

TEST_CASE("a step's --backend gpu without a device exits 2 with a reason", "[steps]") {
  std::string why;
  if (attn::make_gpu_backend(why)) return;  // a GPU is present: nothing to check here
  attn::Options o;
  o.backend = "gpu";
  const attn::RunOutcome r = attn::run_step(step_named("step1_naive"), o);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::Contains("--backend gpu") && Catch::Contains("no CUDA device"));
}
