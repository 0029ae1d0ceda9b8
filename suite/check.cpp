// attn_suite check: every kernel over the test matrix (tests/matrix.h) and the tile-boundary shapes
// of its own tile (tests/boundary.h), each run on fresh random inputs (a new seed per invocation,
// printed so that a failure can be repeated) into outputs poisoned before it, checked against the
// FP64 reference. The reference of a problem is computed once and shared by every kernel.
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>

#include "common/backend.h"
#include "common/check.h"
#include "common/reference.h"
#include "suite/suite.h"
#include "tests/boundary.h"
#include "tests/matrix.h"
#include "tests/steps.h"

namespace suite {

namespace {

// A problem and how its inputs are made: the usual ones, or a boundary problem's for tiles of
// `boundary_keys` keys (tests/boundary.h: K raised on the keys next to a tile boundary).
struct Case {
  attn::Problem problem;
  int boundary_keys = 0;
  std::string name() const {
    return problem.describe() +
           (boundary_keys ? " (tile boundary, Bc " + std::to_string(boundary_keys) + ")" : "");
  }
};

// The two small shapes of the sanitizers (and of a rehearsal): odd lengths, Sq != Sk, causal with
// GQA in bf16; per-batch key lengths (one batch empty) with dropout in fp16.
std::vector<Case> sanitize_cases() {
  using attn::DType;
  return {{attn_test::make(2, 4, 2, 33, 77, 128, DType::bf16, true)},
          {attn_test::make(3, 2, 2, 40, 100, 64, DType::fp16, false, {100, 37, 0}, 0.1f)}};
}

// The boundary problems of the kernel's own tile, for head dims 64 and 128, with and without
// dropout (as the tests' run_boundaries); none for a kernel without tiles (step 1).
std::vector<Case> boundary_cases(const Kernel& k) {
  std::vector<Case> out;
  if (k.step->cpu == nullptr) return out;  // the baseline: no CPU copy to ask for its tile
  // A backward's (step 6's tiled rungs) too: run_case checks its gradients through the harness,
  // on the boundary problem's own inputs, as tests/test_steps.cpp does on the CPU backend.
  const attn::StepInfo step = attn_test::as_rung(*k.step, k.rung);
  const std::string variant = k.rung.empty() ? k.variant : "";
  const std::string config =
      k.config.empty() && !step.configs.empty() && k.rung.empty() ? step.configs[0].name : k.config;
  for (int dim : {64, 128})
    for (float dropout : {0.0f, 0.1f}) {
      const attn::RunContext::Tile tile = attn_test::tile_of(step, variant, config, dim, dropout);
      if (tile.rows == 0 || tile.keys == 0) return {};
      for (attn::Problem& p : attn_test::boundary_problems(tile, dim, dropout))
        out.push_back({std::move(p), tile.keys});
    }
  return out;
}

// A seed of its own for each problem, from the invocation's seed and the problem.
uint64_t case_seed(uint64_t seed, const std::string& name) {
  uint64_t z = seed + std::hash<std::string>{}(name) + 0x9E3779B97F4A7C15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The inputs and FP64 reference of each case, made once, for every kernel.
class References {
 public:
  explicit References(uint64_t seed) : seed_(seed) {}
  struct Entry {
    attn::Problem problem;
    attn::HostInputs inputs;
    attn::Reference ref;
  };
  const Entry& get(const Case& c) {
    std::unique_ptr<Entry>& e = cache_[c.name()];
    if (!e) {
      e = std::make_unique<Entry>();
      e->problem = c.problem;
      e->problem.seed = case_seed(seed_, c.name());
      e->inputs = c.boundary_keys ? attn_test::boundary_inputs(e->problem, c.boundary_keys)
                                  : attn::make_inputs(e->problem);
      e->ref = attn::reference_attention(e->problem, e->inputs);
    }
    return *e;
  }

 private:
  uint64_t seed_;
  std::map<std::string, std::unique_ptr<Entry>> cache_;
};

struct Outcome {
  std::string status;  // pass, fail, skipped, not run
  std::string detail;  // why not pass
  attn::CheckResult check;
  std::string device;
};

Outcome run_case(const Kernel& k, const attn::Options& base, const References::Entry& e) {
  attn::Options o = k.options(base);
  o.problem = e.problem;
  o.inputs = &e.inputs;
  if (k.step->backward) {  // its gradients are checked by the harness (check_gradients)
    o.check = true;
    o.keep_outputs = false;
  }
  const attn::RunOutcome r = attn::run_step(*k.step, o);
  Outcome out;
  out.device = r.row.device;
  if (r.exit_code == 2) return {"skipped", r.message, {}, r.row.device};
  if (!r.ran) return {"fail", r.message, {}, r.row.device};
  out.check = k.step->backward ? r.row.check : attn::check_outputs(e.problem, r.o, r.lse, e.ref);
  out.status = out.check.passed ? "pass" : "fail";
  out.detail = out.check.first_failure;
  return out;
}

class CsvOut {
 public:
  explicit CsvOut(const std::string& path) {
    if (path.empty()) return;
    file_.open(path);
    if (!file_) throw std::invalid_argument("--csv " + path + ": cannot write it");
    file_ << "kernel,set,backend,device,case,seed,status,max_abs_err,lse_max_err,detail\n";
  }
  void row(const Kernel& k, const std::string& backend, const Outcome& o, const std::string& name,
           uint64_t seed) {
    if (!file_.is_open()) return;
    using attn::csv_escape;
    file_ << csv_escape(k.label) << "," << k.set << "," << backend << "," << csv_escape(o.device)
          << "," << csv_escape(name) << "," << seed << "," << o.status << "," << o.check.max_abs_err
          << "," << o.check.lse_max_err << "," << csv_escape(o.detail) << "\n"
          << std::flush;
  }

 private:
  std::ofstream file_;
};

}  // namespace

int check(const CheckArgs& args) {
  std::vector<Kernel> ks;
  std::vector<Case> common;
  try {
    ks = kernels(args.kernel_sets);
    if (args.cases == "matrix")
      for (attn::Problem& p : attn_test::matrix()) common.push_back({std::move(p)});
    else if (args.cases == "sanitize")
      common = sanitize_cases();
    else
      throw std::invalid_argument("--cases " + args.cases + ": matrix or sanitize");
    if (const std::string why = backend_unavailable(args.backend); !why.empty())
      throw std::invalid_argument(why);
  } catch (const std::invalid_argument& e) {
    std::cerr << "attn_suite check: " << e.what() << "\n";
    return 2;
  }
  std::random_device fresh;
  const uint64_t seed = args.seed ? args.seed : (uint64_t(fresh()) << 32 | fresh()) | 1;
  std::cout << "check: " << ks.size() << " kernels, backend " << args.backend << ", cases "
            << args.cases << ", seed " << seed << " (--seed " << seed << " repeats these inputs)"
            << std::endl;
  std::unique_ptr<CsvOut> csv;
  try {
    csv = std::make_unique<CsvOut>(args.csv);
  } catch (const std::invalid_argument& e) {
    std::cerr << "attn_suite check: " << e.what() << "\n";
    return 2;
  }
  attn::Options base;
  base.backend = args.backend;
  base.iters = 0;
  base.warmup = 0;
  base.check = false;  // checked here, against the reference shared by every kernel
  base.keep_outputs = true;
  base.tuned_table = args.tuned_table;

  References refs(seed);
  const Budget budget(args.budget_s);
  Watchdog watchdog(args.hang_s);
  int failed_kernels = 0, runs = 0, passed = 0, failed = 0, skipped = 0;
  std::vector<std::string> not_run;
  std::string lost;  // the run after which the GPU's context was lost (a fault is sticky)
  for (const Kernel& k : ks) {
    if (budget.spent() || !lost.empty()) {
      not_run.push_back(k.label);
      continue;
    }
    std::vector<Case> cases = common;
    if (args.cases == "matrix")
      for (Case& c : boundary_cases(k)) cases.push_back(std::move(c));
    int k_pass = 0, k_fail = 0, k_skip = 0;
    std::string first;
    for (const Case& c : cases) {
      const References::Entry& e = refs.get(c);
      watchdog.arm(k.label + " on " + c.name());
      const Outcome o = run_case(k, base, e);
      watchdog.disarm();
      csv->row(k, args.backend, o, c.name(), e.problem.seed);
      ++runs;
      if (o.status == "pass") ++k_pass;
      if (o.status == "skipped") ++k_skip;
      if (o.status == "fail") {
        ++k_fail;
        if (first.empty()) first = c.name() + ": " + o.detail;
        if (const std::string why = backend_unavailable(args.backend); !why.empty()) {
          lost = k.label + " on " + c.name() + " (" + why + ")";
          break;
        }
      }
    }
    passed += k_pass, failed += k_fail, skipped += k_skip;
    failed_kernels += k_fail > 0;
    std::cout << (k_fail   ? "FAIL "
                  : k_pass ? "PASS "
                           : "SKIP ")
              << k.label << ": " << k_pass << " passed, " << k_fail << " failed, " << k_skip
              << " skipped" << (first.empty() ? "" : "; first: " + first) << std::endl;
  }
  std::cout << "check: " << runs << " runs: " << passed << " passed, " << failed << " failed ("
            << failed_kernels << " kernels), " << skipped << " skipped";
  if (!lost.empty())
    std::cout << "; the GPU's context was lost after " << lost
              << ": no kernel can run after it in this process";
  if (!not_run.empty()) {
    std::cout << "; "
              << (lost.empty() ? "the budget of " + std::to_string(int(args.budget_s)) +
                                     " s was spent before "
                               : "not run: ")
              << not_run.size() << " kernels";
    for (size_t i = 0; i < not_run.size(); ++i) std::cout << (i ? ", " : ": ") << not_run[i];
  }
  std::cout << std::endl;
  return failed ? 1 : not_run.empty() ? 0 : 3;
}

}  // namespace suite
