#include "common/harness.h"

#include <algorithm>
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

RunOutcome invalid(const std::string& why) {
  RunOutcome r;
  r.exit_code = 2;
  r.message = why;
  return r;
}

}  // namespace

DeviceProblem::DeviceProblem(Backend& be, const Problem& p, const HostInputs& in) : be_(be) {
  const size_t qo_bytes = p.q_elements() * sizeof(Bits16);
  const size_t kv_bytes = p.kv_elements() * sizeof(Bits16);
  AttentionParams& a = params_;
  void* q = alloc(qo_bytes, "Q");
  void* k = alloc(kv_bytes, "K");
  void* v = alloc(kv_bytes, "V");
  be.upload(q, in.q.data(), qo_bytes);
  be.upload(k, in.k.data(), kv_bytes);
  be.upload(v, in.v.data(), kv_bytes);
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = alloc(qo_bytes, "O");
  a.lse = static_cast<float*>(alloc(p.lse_elements() * sizeof(float), "LSE"));
  be.poison(a.o, qo_bytes);
  be.poison(a.lse, p.lse_elements() * sizeof(float));
  if (!p.seqlens_k.empty()) {
    void* lens = alloc(p.seqlens_k.size() * sizeof(int), "seqlens_k");
    be.upload(lens, p.seqlens_k.data(), p.seqlens_k.size() * sizeof(int));
    a.seqlens_k = static_cast<const int*>(lens);
  }
  a.batch = p.batch;
  a.heads = p.heads;
  a.heads_kv = p.kv_heads();
  a.seqlen_q = p.seqlen_q;
  a.seqlen_k = p.seqlen_k;
  a.dim = p.dim;
  a.dtype = p.dtype;
  a.scale = p.softmax_scale();
  a.causal = p.causal;
  a.dropout = p.dropout;
  a.seed = p.seed;
}

DeviceProblem::~DeviceProblem() {
  for (void* ptr : buffers_) be_.release(ptr);
}

void* DeviceProblem::alloc(size_t bytes, const char* label) {
  buffers_.push_back(be_.alloc(bytes, label));
  return buffers_.back();
}

void DeviceProblem::download(std::vector<Bits16>& o, std::vector<float>& lse) const {
  const int64_t rows = int64_t(params_.batch) * params_.heads * params_.seqlen_q;
  o.resize(rows * params_.dim);
  lse.resize(rows);
  be_.download(o.data(), params_.o, o.size() * sizeof(Bits16));
  be_.download(lse.data(), params_.lse, lse.size() * sizeof(float));
}

RunOutcome run_step(const StepInfo& step, const Options& opt) {
  RunOutcome out;
  const Problem& p = opt.problem;
  if (!step.head_dims.empty() &&
      std::find(step.head_dims.begin(), step.head_dims.end(), p.dim) == step.head_dims.end())
    return invalid(step.name + ": --dim " + std::to_string(p.dim) +
                   ": this step supports head dims " + join(step.head_dims));

  const auto& variants = step.variants;
  if (!opt.variant.empty() && variants.empty())
    return invalid(step.name + ": --variant " + opt.variant + ": this step has a single kernel");
  if (!opt.variant.empty() &&
      std::find(variants.begin(), variants.end(), opt.variant) == variants.end()) {
    std::string known;
    for (const std::string& v : variants) known += (known.empty() ? "" : ", ") + v;
    return invalid(step.name + ": --variant " + opt.variant + ": this step has variants " + known);
  }

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
  if (!be && step.cpu == nullptr)
    return invalid(step.name + (opt.backend == "cpu" ? ": --backend cpu" : "") +
                   ": runs on a GPU only" + (why_not.empty() ? "" : ": " + why_not));
  if (!be) {
    be = make_cpu_backend();
    simt::set_schedule(simt::parse_schedule(opt.schedule));
  }
  const bool on_gpu = be->name() == "gpu";
  const StepFn run = on_gpu ? step.gpu : step.cpu;

  // The variant is part of the step's name in the result line and the CSV: "step5_x[sm80]".
  std::string variant = opt.variant;
  if (variant.empty() && !variants.empty())
    variant = step.default_variant ? step.default_variant(*be) : variants.front();

  ResultRow& row = out.row;
  row.step = step.name + (variant.empty() ? "" : "[" + variant + "]");
  row.problem = p;
  row.iters = opt.iters;
  row.commit = build_commit();
  row.toolkit = cuda_toolkit_version();
  row.timestamp = now_utc();
  try {
    row.backend = be->name();
    row.device = be->device();
    row.driver = be->driver();
    row.sm_clock_mhz = be->sm_clock_mhz();
    row.schedule = on_gpu ? "" : opt.schedule;

    const HostInputs in = make_inputs(p);
    const DeviceProblem dev(*be, p, in);
    const AttentionParams& params = dev.params();
    RunContext ctx(*be);
    ctx.variant = variant;

    // The checked run: outputs start poisoned, so anything left unwritten is caught.
    ctx.verify = true;
    be->time_ms([&] { run(params, ctx); });
    ctx.verify = false;
    if (opt.check) {
      std::vector<Bits16> o;
      std::vector<float> lse;
      dev.download(o, lse);
      row.checked = true;
      row.check = check_outputs(p, o, lse, reference_attention(p, in));
    }

    for (int i = 0; i < opt.warmup; ++i) be->time_ms([&] { run(params, ctx); });
    std::vector<double> times;
    for (int i = 0; i < opt.iters; ++i) {
      be->flush_l2();  // every timed run starts with cold L2, outside the timed window
      times.push_back(be->time_ms([&] { run(params, ctx); }));
    }
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
