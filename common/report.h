// Result rows: one per run, printed as a line and appended to a CSV file with a header.
#pragma once

#include <string>
#include <vector>

#include "common/check.h"
#include "common/problem.h"
#include "common/simt/counters.h"
#include "common/sol_model.h"

namespace attn {

struct ResultRow {
  std::string step;
  std::string backend;  // cpu | gpu (or a baseline's name)
  std::string device;   // GPU name, or the CPU model for the CPU backends
  Problem problem;
  int iters = 0;
  double time_ms = 0;  // median over iters
  double tflops = 0;   // problem.flops() / time
  bool checked = false;
  CheckResult check;      // a backward step's: passed, first_failure and max_abs_err (dQ, dK, dV's)
  bool backward = false;  // a backward step: `grads` is its check
  GradientCheck grads;
  std::string schedule;       // CPU backend fiber order; empty on the GPU
  std::string config;         // the tile configuration that ran; empty for steps without any
  std::string config_source;  // why: "--config", "tuned", "default" (result line only)
  std::string commit;
  std::string toolkit;   // CUDA toolkit version the binary was built with
  std::string driver;    // CUDA driver version, or "none"
  int sm_clock_mhz = 0;  // peak SM clock the device reports; 0 on the CPU
  std::string timestamp;
  // --counters: what the checked run did (common/simt/counters.h), and the speed-of-light model
  // of it on one GPU (a model, never a measurement).
  bool counted = false;
  simt::counters::Report counters;
  bool instrumented = false;  // --instrumented: the checked run checked every access
  SolModel model;
};

// The CSV columns, in order. scripts/ and docs/benchmarking.md ("The CSV columns") use these names.
const std::vector<std::string>& csv_columns();
std::vector<std::string> csv_fields(const ResultRow& r);

// Appends `r` to `path`, writing the header first when the file is new or empty. Returns an empty
// string on success, otherwise a one-line reason (for example a header that does not match).
std::string append_csv(const std::string& path, const ResultRow& r);

// Human-readable summary of a run (two lines).
std::string format_result(const ResultRow& r);
// The counters of a counted run, as a table with the Nsight Compute metric of each, the top source
// lines, and the model on every GPU it knows.
std::string format_counters(const ResultRow& r);

// Quotes a CSV field when it holds a comma, quote or newline.
std::string csv_escape(const std::string& s);

}  // namespace attn
