// attn_suite time: kernels over a file of shapes, one process for all of them, timed as the steps'
// executables time (common/harness.cpp, time_runs: CUDA events around a sample of back-to-back runs
// over input sets that keep L2 cold, the median of --iters samples after --warmup).
//
// The shapes file holds one shape a line, as a step's flags ("--batch 1 --heads 8 --seq 512
// --dim 64 --dtype bf16 --causal"); '#' starts a comment. Each shape's inputs are made once and
// shared by every kernel. A kernel whose run the shapes before predict to take longer than --cap-ms
// (its time per FLOP so far, times this shape's FLOPs) is not timed on it, and the log says so:
// a slow unfused step on a 16k-token problem would take the whole budget.
// --backward times the backward kernels instead (step 6 and its rungs, FLOPs counted as 2.5 times
// the forward's, docs/benchmarking.md), each shape's dO, O and LSE made once from the FP64 forward.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "common/backend.h"
#include "common/reference.h"
#include "common/report.h"
#include "common/tensors.h"
#include "suite/suite.h"

namespace suite {

namespace {

// Reads the shapes file; throws std::invalid_argument naming the line of a bad one.
std::vector<attn::Problem> read_shapes(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("--shapes " + path + ": cannot read it");
  std::vector<attn::Problem> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::vector<std::string> args = {"attn_suite time"};
    for (std::string w; words >> w;) args.push_back(w);
    if (args.size() == 1) continue;
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    attn::Options o;
    const attn::CliResult r = attn::parse_cli(int(argv.size()), argv.data(), "shape", o);
    const std::string where = path + ":" + std::to_string(n) + ": ";
    if (r.exit_code >= 0)
      throw std::invalid_argument(where + (r.exit_code == 0 ? "--help is not a shape" : r.message));
    const attn::Options plain;
    if (o.backend != plain.backend || o.iters != plain.iters || o.warmup != plain.warmup ||
        !o.rung.empty() || !o.variant.empty() || !o.config.empty() || !o.csv.empty() ||
        !o.load.empty() || !o.save.empty() || !o.check || o.counters)
      throw std::invalid_argument(where +
                                  "a shape holds the problem's flags alone (the kernels "
                                  "and how they run are attn_suite's own flags)");
    out.push_back(o.problem);
  }
  if (out.empty()) throw std::invalid_argument("--shapes " + path + ": no shapes in it");
  return out;
}

void print_row(const attn::ResultRow& r) {
  std::printf("%-40s %-48s %10.4f ms %8.2f TFLOPS\n", r.step.c_str(), r.problem.describe().c_str(),
              r.time_ms, r.tflops);
  std::fflush(stdout);
}

}  // namespace

int time(const TimeArgs& args) {
  std::vector<Kernel> ks;
  std::vector<attn::Problem> shapes;
  try {
    ks = kernels(args.kernel_sets);
    // The forward kernels, or with --backward the backward's (step 6 and its rungs) alone: the
    // two are timed apart, each beside SDPA's own (scripts/bench_torch.py [--backward]).
    std::erase_if(ks, [&](const Kernel& k) { return k.step->backward != args.backward; });
    if (ks.empty())
      throw std::invalid_argument("--kernels " + args.kernel_sets + ": no " +
                                  (args.backward ? "backward" : "forward") + " kernel in them");
    shapes = read_shapes(args.shapes);
    if (const std::string why = backend_unavailable(args.backend); !why.empty())
      throw std::invalid_argument(why);
    if (!args.csv.empty() && !std::ofstream(args.csv, std::ios::app))
      throw std::invalid_argument("--csv " + args.csv + ": cannot write it");
  } catch (const std::invalid_argument& e) {
    std::cerr << "attn_suite time: " << e.what() << "\n";
    return 2;
  }
  attn::Options base;
  base.backend = args.backend;
  base.iters = args.iters;
  base.warmup = args.warmup;
  base.check = false;  // the check stage checks; this one times
  base.tuned_table = args.tuned_table;
  std::cout << "time: " << ks.size() << " kernels x " << shapes.size() << " shapes, " << args.iters
            << " samples after " << args.warmup << " warm-up ones, runs over " << args.cap_ms
            << " ms left out" << std::endl;

  const Budget budget(args.budget_s);
  Watchdog watchdog(args.hang_s);
  std::map<std::string, double> ms_per_flop;  // each kernel's time per FLOP on the last shape
  int timed = 0, failed = 0, left = 0;
  for (const attn::Problem& p : shapes) {
    const attn::HostInputs in = attn::make_inputs(p);
    // A backward's dO and the forward's O and LSE (the FP64 forward's, as a step's run makes them
    // when unchecked), made once a shape and shared by its kernels, as Q, K and V are.
    std::optional<attn::BackwardInputs> bin;
    if (args.backward && !budget.spent()) {
      attn::ReferenceGrads fwd;
      attn::Reference f = attn::reference_attention(p, in);
      fwd.o = std::move(f.o);
      fwd.lse = std::move(f.lse);
      bin = attn::backward_inputs(p, attn::make_dout(p), fwd);
    }
    for (const Kernel& k : ks) {
      if (budget.spent()) {
        ++left;
        continue;
      }
      if (auto it = ms_per_flop.find(k.label);
          it != ms_per_flop.end() && it->second * p.flops() > args.cap_ms) {
        std::printf("%-40s %-48s left out: about %.0f ms a run (over --cap-ms %g)\n",
                    k.label.c_str(), p.describe().c_str(), it->second * p.flops(), args.cap_ms);
        continue;
      }
      attn::Options o = k.options(base);
      o.problem = p;
      o.inputs = &in;
      o.backward_inputs = bin ? &*bin : nullptr;
      watchdog.arm(k.label + " on " + p.describe());
      const attn::RunOutcome r = attn::run_step(*k.step, o);
      watchdog.disarm();
      if (!r.ran) {
        failed += r.exit_code == 1;
        std::printf("%-40s %-48s %s: %s\n", k.label.c_str(), p.describe().c_str(),
                    r.exit_code == 1 ? "FAILED" : "skipped", r.message.c_str());
        if (const std::string why = backend_unavailable(args.backend);
            r.exit_code == 1 && !why.empty()) {
          std::cout << "time: the GPU's context was lost after " << k.label << " on "
                    << p.describe() << " (" << why << "): no kernel can run after it" << std::endl;
          return 1;
        }
        continue;
      }
      ms_per_flop[k.label] = r.row.time_ms / p.flops();
      print_row(r.row);
      ++timed;
      if (!args.csv.empty())
        if (const std::string err = attn::append_csv(args.csv, r.row); !err.empty()) {
          std::cerr << "attn_suite time: " << err << "\n";
          return 2;
        }
    }
  }
  std::cout << "time: " << timed << " rows, " << failed << " failed";
  if (left)
    std::cout << "; the budget of " << args.budget_s << " s was spent with " << left
              << " (kernel, shape) pairs left";
  std::cout << std::endl;
  return failed ? 1 : left ? 3 : 0;
}

}  // namespace suite
