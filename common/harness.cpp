#include "common/harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <exception>
#include <iostream>

#include "common/check.h"
#include "common/reference.h"
#include "common/simt/launch.h"
#include "common/tensors.h"

namespace attn {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

// Device copies of the inputs and outputs, released with the backend's own free.
struct DeviceTensors {
  Backend& be;
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *lse = nullptr, *lens = nullptr;
  ~DeviceTensors() {
    for (void* p : {q, k, v, o, lse, lens})
      if (p) be.release(p);
  }
};

RunOutcome invalid(const std::string& why) {
  RunOutcome r;
  r.exit_code = 2;
  r.message = why;
  return r;
}

}  // namespace

RunOutcome run_step(const StepInfo& step, const Options& opt) {
  RunOutcome out;
  const Problem& p = opt.problem;
  if (!step.head_dims.empty() &&
      std::find(step.head_dims.begin(), step.head_dims.end(), p.dim) == step.head_dims.end())
    return invalid(step.name + ": --dim " + std::to_string(p.dim) +
                   ": this step supports head dims " + join(step.head_dims));

  // Pick the backend.
  std::unique_ptr<Backend> be;
  std::string why_not;
  if (opt.backend == "gpu" || opt.backend == "auto") {
    if (step.gpu == nullptr)
      why_not = step.name + " runs on the CPU only";
    else
      be = make_gpu_backend(why_not);
    if (!be && opt.backend == "gpu") return invalid(step.name + ": --backend gpu: " + why_not);
    if (!be && step.gpu != nullptr)
      out.message = "note: " + why_not + "; running on the CPU backend";
  }
  if (!be) {
    be = make_cpu_backend();
    simt::set_schedule(simt::parse_schedule(opt.schedule));
  }
  const bool on_gpu = be->name() == "gpu";
  const StepFn run = on_gpu ? step.gpu : step.cpu;

  ResultRow& row = out.row;
  row.step = step.name;
  row.problem = p;
  row.iters = opt.iters;
  row.commit = build_commit();
  row.toolkit = cuda_toolkit_version();
  row.timestamp = now_utc();
  try {
    row.backend = be->name();
    row.device = be->device();
    row.driver = be->driver();
    row.schedule = on_gpu ? "" : opt.schedule;

    const HostInputs in = make_inputs(p);
    const size_t qo_bytes = p.q_elements() * sizeof(Bits16);
    const size_t kv_bytes = p.kv_elements() * sizeof(Bits16);
    const size_t lse_bytes = p.lse_elements() * sizeof(float);
    DeviceTensors dev{*be};
    dev.q = be->alloc(qo_bytes, "Q");
    dev.k = be->alloc(kv_bytes, "K");
    dev.v = be->alloc(kv_bytes, "V");
    dev.o = be->alloc(qo_bytes, "O");
    dev.lse = be->alloc(lse_bytes, "LSE");
    be->upload(dev.q, in.q.data(), qo_bytes);
    be->upload(dev.k, in.k.data(), kv_bytes);
    be->upload(dev.v, in.v.data(), kv_bytes);
    if (!p.seqlens_k.empty()) {
      dev.lens = be->alloc(p.seqlens_k.size() * sizeof(int), "seqlens_k");
      be->upload(dev.lens, p.seqlens_k.data(), p.seqlens_k.size() * sizeof(int));
    }
    be->poison(dev.o, qo_bytes);
    be->poison(dev.lse, lse_bytes);

    const AttentionParams params{dev.q,
                                 dev.k,
                                 dev.v,
                                 dev.o,
                                 static_cast<float*>(dev.lse),
                                 static_cast<const int*>(dev.lens),
                                 p.batch,
                                 p.heads,
                                 p.kv_heads(),
                                 p.seqlen_q,
                                 p.seqlen_k,
                                 p.dim,
                                 p.dtype,
                                 p.softmax_scale(),
                                 p.causal,
                                 p.dropout,
                                 p.seed};
    RunContext ctx(*be);

    // The checked run: outputs start poisoned, so anything left unwritten is caught.
    ctx.verify = true;
    be->time_ms([&] { run(params, ctx); });
    ctx.verify = false;
    if (opt.check) {
      std::vector<Bits16> o(p.q_elements());
      std::vector<float> lse(p.lse_elements());
      be->download(o.data(), dev.o, qo_bytes);
      be->download(lse.data(), dev.lse, lse_bytes);
      row.checked = true;
      row.check = check_outputs(p, o, lse, reference_attention(p, in));
    }

    for (int i = 0; i < opt.warmup; ++i) be->time_ms([&] { run(params, ctx); });
    std::vector<double> times;
    for (int i = 0; i < opt.iters; ++i) times.push_back(be->time_ms([&] { run(params, ctx); }));
    row.time_ms = median(times);
    row.tflops = row.time_ms > 0 ? p.flops() / (row.time_ms * 1e-3) / 1e12 : 0;
    out.ran = true;
  } catch (const std::exception& e) {
    out.exit_code = 1;
    out.message = step.name + ": " + e.what();
    return out;
  }
  if (row.checked && !row.check.passed) out.exit_code = 1;
  return out;
}

int step_main(int argc, char** argv, const StepInfo& step) {
  Options opt;
  const CliResult cli = parse_cli(argc, argv, step.name, opt);
  if (cli.exit_code == 0) {
    std::cout << cli.message;
    return 0;
  }
  if (cli.exit_code > 0) {
    std::cerr << cli.message << "\n";
    return cli.exit_code;
  }
  const RunOutcome r = run_step(step, opt);
  if (!r.message.empty()) std::cerr << r.message << "\n";
  if (!r.ran) return r.exit_code;
  std::cout << (opt.quiet ? "" : format_result(r.row) + "\n");
  if (opt.quiet)
    std::cout << csv_escape(r.row.step) << " " << r.row.time_ms << " ms "
              << (r.row.checked ? (r.row.check.passed ? "PASSED" : "FAILED") : "unchecked") << "\n";
  if (!opt.csv.empty()) {
    if (const std::string err = append_csv(opt.csv, r.row); !err.empty()) {
      std::cerr << step.name << ": " << err << "\n";
      return 2;
    }
  }
  return r.exit_code;
}

}  // namespace attn

namespace attn {
std::string cuda_toolkit_version() {
  return ATTN_CUDA_TOOLKIT_VERSION;
}
}  // namespace attn
