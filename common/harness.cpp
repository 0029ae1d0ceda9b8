#include "common/harness.h"

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <mutex>
#include <stdexcept>

#include "common/arch.h"
#include "common/check.h"
#include "common/memory.h"
#include "common/reference.h"
#include "common/simt/counters.h"
#include "common/simt/device.h"
#include "common/simt/launch.h"
#include "common/sol_model.h"
#include "common/tensor_io.h"
#include "common/tensors.h"
#include "common/tuned_configs.h"

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

// Blocks done, elapsed and an estimate of the rest, on one rewritten stderr line, for a kernel
// launch on the CPU backend that runs longer than a couple of seconds. Installed only when stderr
// is a terminal.
class Progress {
 public:
  explicit Progress(std::string step) : step_(std::move(step)) {
    simt::set_progress_hook(
        [this](uint64_t started, uint64_t total) { update(started, total, "CPU backend, block"); });
  }
  // Rows of a step that runs no kernel (step 0).
  void rows(uint64_t done, uint64_t total) { update(done, total, "row"); }
  ~Progress() {
    simt::set_progress_hook({});
    clear();
  }
  // Erases the progress line (before other output).
  void clear() {
    std::lock_guard lock(mutex_);
    if (shown_) std::fprintf(stderr, "\r\033[K");
    shown_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  void update(uint64_t started, uint64_t total, const char* unit) {
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return;  // another worker is printing; one line is enough
    const auto now = Clock::now();
    if (started <= 1 || total != total_ || started < last_started_) start_ = now;  // a new launch
    total_ = total;
    last_started_ = started;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    if (elapsed < 2.0 || now - printed_ < std::chrono::milliseconds(500)) return;
    printed_ = now;
    const double left = elapsed / double(started) * double(total - started);
    std::fprintf(stderr, "\r\033[K%s: %s %llu of %llu, %.0f s elapsed, about %.0f s left",
                 step_.c_str(), unit, static_cast<unsigned long long>(started),
                 static_cast<unsigned long long>(total), elapsed, left);
    std::fflush(stderr);
    shown_ = true;
  }
  std::string step_;
  std::mutex mutex_;
  Clock::time_point start_ = Clock::now(), printed_{};
  uint64_t total_ = 0, last_started_ = 0;
  bool shown_ = false;
};

// Tensors from which the checks below run on every core (below it, libgomp's idle threads would
// spin for longer than the loop takes).
constexpr int64_t kParallelElements = int64_t(1) << 22;

// Whether element x of a [batch][heads][rows][dim] tensor of n elements lies in a row its batch
// has: rows past a batch's length (`lengths`; empty: every row is real) are its padding, which no
// kernel and no reference reads (a padded KV cache may hold anything there).
bool real_row(const Problem& p, int64_t x, int64_t n, int rows, const std::vector<int>& lengths) {
  return lengths.empty() || x / p.dim % rows < lengths[size_t(x / (n / p.batch))];
}

// Scores |scale * q.k| reach at most |scale| * dim * max|q| * max|k|; the kernels also multiply
// them by log2(e) and subtract the row maximum, so twice that must stay finite in FP32. Returns ""
// or why the scale is refused.
std::string check_scale(const Problem& p, const HostInputs& in) {
  auto max_abs = [&](const std::vector<Bits16>& t, int rows, const std::vector<int>& lengths) {
    double m = 0;
    const int64_t n = int64_t(t.size());
#pragma omp parallel for reduction(max : m) if (n >= kParallelElements)
    for (int64_t x = 0; x < n; ++x)
      if (real_row(p, x, n, rows, lengths))
        m = std::max(m, double(std::fabs(from_bits(t[x], p.dtype))));
    return m;
  };
  const double bound = std::fabs(double(p.softmax_scale())) * p.dim *
                       max_abs(in.q, p.seqlen_q, p.seqlens_q) *
                       max_abs(in.k, p.seqlen_k, p.seqlens_k);
  if (bound * 2 * 1.4427 <= FLT_MAX) return "";
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "--scale %g: scores reach %.3g for these inputs (|scale| * dim * max|q| * max|k|), "
                "and the kernels compute with 2 log2(e) = 2.885 times that (base-2 exponentials, "
                "after subtracting the row maximum): %.3g, beyond FP32's %.3g; use |scale| <= %.3g",
                double(p.softmax_scale()), bound, bound * 2 * 1.4427, double(FLT_MAX),
                std::fabs(double(p.softmax_scale())) * FLT_MAX / (bound * 2 * 1.4427));
  return buf;
}

// "" or why a given 16-bit [batch][heads][rows][dim] tensor is refused: the first NaN or Inf in a
// row its batch has (real_row).
std::string check_finite(const char* name, const std::vector<Bits16>& t, const Problem& p, int rows,
                         const std::vector<int>& lengths) {
  const int64_t n = int64_t(t.size());
  int64_t first = n;
#pragma omp parallel for reduction(min : first) if (n >= kParallelElements)
  for (int64_t x = 0; x < n; ++x)
    if (real_row(p, x, n, rows, lengths) && !std::isfinite(from_bits(t[x], p.dtype)))
      first = std::min(first, x);
  if (first == n) return "";
  return std::string("tensor '") + name + "' holds NaN or Inf (first at flat index " +
         std::to_string(first) + ")";
}

// A loaded tensor holding NaN or Inf (outside its batches' padding) has no attention to check
// against: refused.
std::string check_finite(const Problem& p, const HostInputs& in) {
  if (std::string why = check_finite("q", in.q, p, p.seqlen_q, p.seqlens_q); !why.empty())
    return why;
  for (const auto& [name, t] : {std::pair{"k", &in.k}, {"v", &in.v}})
    if (std::string why = check_finite(name, *t, p, p.seqlen_k, p.seqlens_k); !why.empty())
      return why;
  return "";
}

// The FP64 reference costs about 4 * dim FLOP per visible score; past this it takes long enough
// on a CPU to be worth a note (Eigen reaches roughly 1 to 5 GFLOP/s per core in FP64 here).
constexpr double kLongCheckFlops = 5e10;

// Which of the step's configurations runs: --config, else the tuned table's row for this arch
// and problem, else the default (the first). Returns "" or the reason for exit code 2.
std::string choose_config(const StepInfo& step, const Options& opt, const std::string& arch,
                          ResultRow& row) {
  std::string known;
  for (const auto& c : step.configs) known += (known.empty() ? "" : ", ") + c.name;
  if (step.configs.empty()) {
    if (!opt.config.empty())
      return step.name + ": --config " + opt.config + ": this step has no tile configurations";
    return "";
  }
  std::string name = opt.config, source = "--config";
  if (name.empty()) {
    const std::string path = opt.tuned_table.empty() ? step.tuned_table : opt.tuned_table;
    std::vector<TunedRow> rows;
    if (const std::string err = read_tuned_table(path, rows); !err.empty())
      return step.name + ": " + err;
    name = lookup_tuned(rows, arch, opt.problem);
    source = "tuned for " + arch;
    if (!name.empty() && std::none_of(step.configs.begin(), step.configs.end(),
                                      [&](const auto& c) { return c.name == name; }))
      return step.name + ": " + path + ": unknown config " + name + " (known: " + known + ")";
    if (name.empty()) name = step.configs.front().name, source = "default";
  }
  const auto it = std::find_if(step.configs.begin(), step.configs.end(),
                               [&](const auto& c) { return c.name == name; });
  if (it == step.configs.end())
    return step.name + ": --config " + name + ": unknown configuration (known: " + known + ")";
  if (std::find(it->head_dims.begin(), it->head_dims.end(), opt.problem.dim) == it->head_dims.end())
    return step.name + ": config " + name + " (" + source + ") is built for head dims " +
           join(it->head_dims) + ", not " + std::to_string(opt.problem.dim);
  row.config = name;
  row.config_source = source;
  return "";
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
  set_problem(p);
}

DeviceProblem::DeviceProblem(Backend& be, const Problem& p, const Options::DeviceArrays& arrays,
                             bool poison)
    : be_(be) {
  AttentionParams& a = params_;
  a.q = arrays.q;
  a.k = arrays.k;
  a.v = arrays.v;
  a.o = arrays.o;
  a.lse = arrays.lse;
  if (poison) {
    be.poison(a.o, p.q_elements() * sizeof(Bits16));
    be.poison(a.lse, p.lse_elements() * sizeof(float));
  }
  set_problem(p);
}

void DeviceProblem::set_problem(const Problem& p) {
  AttentionParams& a = params_;
  if (!p.seqlens_k.empty()) {
    void* lens = alloc(p.seqlens_k.size() * sizeof(int), "seqlens_k");
    be_.upload(lens, p.seqlens_k.data(), p.seqlens_k.size() * sizeof(int));
    a.seqlens_k = static_cast<const int*>(lens);
  }
  if (!p.seqlens_q.empty()) {
    void* lens = alloc(p.seqlens_q.size() * sizeof(int), "seqlens_q");
    be_.upload(lens, p.seqlens_q.data(), p.seqlens_q.size() * sizeof(int));
    a.seqlens_q = static_cast<const int*>(lens);
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
  host_resize(o, rows * params_.dim, "O (host copy)");
  host_resize(lse, rows, "LSE (host copy)");
  be_.download(o.data(), params_.o, o.size() * sizeof(Bits16));
  be_.download(lse.data(), params_.lse, lse.size() * sizeof(float));
}

void gpu_not_built(const AttentionParams&, RunContext&) {
  throw std::logic_error(std::string("a GPU kernel called in a build without one: ") +
                         kBuiltWithoutToolkit);
}

namespace {

// A backward step's tensors on the backend: the forward's O and LSE written into the problem's
// own O and LSE (which a backward reads), dO uploaded, dQ, dK and dV allocated and poisoned.
class DeviceBackward {
 public:
  DeviceBackward(Backend& be, const Problem& p, const DeviceProblem& dev, const BackwardInputs& in)
      : be_(be), p_(p) {
    const size_t qo_bytes = p.q_elements() * sizeof(Bits16);
    const size_t kv_bytes = p.kv_elements() * sizeof(Bits16);
    try {  // what was allocated goes back if a later allocation fails (no destructor runs then)
      be.upload(dev.params().o, in.o.data(), qo_bytes);
      be.upload(dev.params().lse, in.lse.data(), p.lse_elements() * sizeof(float));
      void* dout = alloc(qo_bytes, "dO");
      be.upload(dout, in.dout.data(), qo_bytes);
      tensors_ = {dout, alloc(qo_bytes, "dQ"), alloc(kv_bytes, "dK"), alloc(kv_bytes, "dV")};
      be.poison(tensors_.dq, qo_bytes);
      be.poison(tensors_.dk, kv_bytes);
      be.poison(tensors_.dv, kv_bytes);
    } catch (...) {
      for (void* ptr : buffers_) be_.release(ptr);
      throw;
    }
  }
  // The caller's arrays in place (Options::DeviceArrays): dQ, dK and dV poisoned when checked.
  DeviceBackward(Backend& be, const Problem& p, const Options::DeviceArrays& d, bool poison)
      : be_(be), p_(p), tensors_{d.dout, d.dq, d.dk, d.dv} {
    if (poison) {
      be.poison(d.dq, p.q_elements() * sizeof(Bits16));
      be.poison(d.dk, p.kv_elements() * sizeof(Bits16));
      be.poison(d.dv, p.kv_elements() * sizeof(Bits16));
    }
  }
  ~DeviceBackward() {
    for (void* ptr : buffers_) be_.release(ptr);
  }
  DeviceBackward(const DeviceBackward&) = delete;
  DeviceBackward& operator=(const DeviceBackward&) = delete;

  const RunContext::BackwardTensors* tensors() const { return &tensors_; }
  Gradients download() const {
    Gradients g;
    host_resize(g.dq, p_.q_elements(), "dQ (host copy)");
    host_resize(g.dk, p_.kv_elements(), "dK (host copy)");
    host_resize(g.dv, p_.kv_elements(), "dV (host copy)");
    be_.download(g.dq.data(), tensors_.dq, g.dq.size() * sizeof(Bits16));
    be_.download(g.dk.data(), tensors_.dk, g.dk.size() * sizeof(Bits16));
    be_.download(g.dv.data(), tensors_.dv, g.dv.size() * sizeof(Bits16));
    return g;
  }

 private:
  void* alloc(size_t bytes, const char* label) {
    buffers_.push_back(be_.alloc(bytes, label));
    return buffers_.back();
  }
  Backend& be_;
  const Problem& p_;
  std::vector<void*> buffers_;
  RunContext::BackwardTensors tensors_{};
};

// Why the caller's backward inputs cannot run ("" if they can): in a batch's real rows, NaN or Inf
// in dO or O, NaN or +Inf in LSE (-inf is a row that sees no key).
std::string check_finite(const Problem& p, const BackwardInputs& b) {
  if (int64_t(b.dout.size()) != p.q_elements() || int64_t(b.o.size()) != p.q_elements() ||
      int64_t(b.lse.size()) != p.lse_elements())
    throw std::logic_error("run_step: backward inputs of another problem's sizes");
  for (const auto& [name, t] : {std::pair{"dout", &b.dout}, {"o", &b.o}})
    if (std::string why = check_finite(name, *t, p, p.seqlen_q, p.seqlens_q); !why.empty())
      return why;
  for (size_t x = 0; x < b.lse.size(); ++x) {
    const int i = int(x % size_t(p.seqlen_q)), bb = int(x / size_t(p.seqlen_q) / size_t(p.heads));
    if (i >= p.query_length(bb)) continue;  // a padding row's: never read
    if (std::isnan(b.lse[x]) || b.lse[x] == INFINITY)
      return "tensor 'lse' holds NaN or +Inf (first at flat index " + std::to_string(x) + ")";
    if (b.lse[x] == -INFINITY && p.row_keys_end(bb, i) > 0)  // P = exp(s - LSE) would be inf
      return "tensor 'lse' is -inf at flat index " + std::to_string(x) +
             ", a row that sees keys (is it the forward's, with the same mask and lengths?)";
  }
  return "";
}

// What a backward step reads besides Q, K and V: the caller's (`given`), or dO drawn (make_dout)
// and the forward's O and LSE from the FP64 forward; and, when the run is checked, the FP64
// gradients it is checked against.
BackwardInputs backward_inputs_for(const Problem& p, const HostInputs& in,
                                   const BackwardInputs* given, bool check, ReferenceGrads& ref) {
  if (given != nullptr) {
    if (check) ref = reference_backward(p, widen(p, in), widen(given->dout, p.dtype));
    return *given;
  }
  std::vector<Bits16> dout = make_dout(p);
  if (check) {
    ref = reference_backward(p, widen(p, in), widen(dout, p.dtype));
  } else {  // the forward alone
    Reference f = reference_attention(p, in);
    ref.o = std::move(f.o);
    ref.lse = std::move(f.lse);
  }
  return backward_inputs(p, std::move(dout), ref);
}

// A backward step's set-up: what it reads besides Q, K and V on the backend beside the problem's
// (the caller's device arrays where given: copied back to the host only when checked), and, when
// checked, the FP64 gradients. Returns "" or why the caller's inputs are refused.
std::string prepare_backward(const StepInfo& step, const Options& opt, Backend& be,
                             const HostInputs& in, const DeviceProblem& dev,
                             std::unique_ptr<DeviceBackward>& bwd, BackwardInputs& bin,
                             ReferenceGrads& ref) {
  const Problem& p = opt.problem;
  const Options::DeviceArrays* d = opt.device_arrays;
  BackwardInputs caller;
  const BackwardInputs* given = opt.backward_inputs;
  if (d != nullptr && opt.check) {
    host_resize(caller.dout, p.q_elements(), "dO (host copy)");
    host_resize(caller.o, p.q_elements(), "O (host copy)");
    host_resize(caller.lse, p.lse_elements(), "LSE (host copy)");
    be.download(caller.dout.data(), d->dout, caller.dout.size() * sizeof(Bits16));
    be.download(caller.o.data(), d->o, caller.o.size() * sizeof(Bits16));
    be.download(caller.lse.data(), d->lse, caller.lse.size() * sizeof(float));
    given = &caller;
  }
  if (given != nullptr)
    if (std::string why = check_finite(p, *given); !why.empty()) return step.name + ": " + why;
  if (d == nullptr || opt.check) bin = backward_inputs_for(p, in, given, opt.check, ref);
  bwd = d != nullptr ? std::make_unique<DeviceBackward>(be, p, *d, opt.check)
                     : std::make_unique<DeviceBackward>(be, p, dev, bin);
  return "";
}

}  // namespace

namespace {

// run_step for the kernel chosen: `rung` is appended to the step's name in the result row.
RunOutcome run_kernel(const StepInfo& step, const Options& opt, const std::string& rung);

}  // namespace

RunOutcome run_step(const StepInfo& step, const Options& opt) {
  if (opt.rung.empty()) return run_kernel(step, opt, "");
  if (step.rungs.empty())
    return invalid(step.name + ": --rung " + opt.rung + ": this step is a single kernel");
  std::string known;
  size_t index = step.rungs.size();
  for (size_t i = 0; i < step.rungs.size(); ++i) {
    known += (i ? ", " : "") + std::to_string(i + 1) + " " + step.rungs[i].name;
    if (opt.rung == step.rungs[i].name || opt.rung == std::to_string(i + 1)) index = i;
  }
  if (index == step.rungs.size())
    return invalid(step.name + ": --rung " + opt.rung + ": this step's rungs are " + known);
  const StepInfo::Rung& r = step.rungs[index];
  Options with_variant = opt;
  if (!r.variant.empty()) {
    if (!opt.variant.empty() && opt.variant != r.variant)
      return invalid(step.name + ": --rung " + opt.rung + ": a rung of the " + r.variant +
                     " variant, not of --variant " + opt.variant);
    with_variant.variant = r.variant;
  }
  // The step's own kernel: the last rung, or one of a variant's that the ladder passes (step 6's
  // sm80 kernel, before the rungs to its sm90a one).
  if (index + 1 == step.rungs.size() || r.cpu == step.cpu)
    return run_kernel(step, with_variant, "");
  if (!opt.config.empty())
    return invalid(step.name + ": --config " + opt.config + ": rung " + r.name +
                   " has one tile configuration (the last rung has the others)");
  StepInfo rung = step;
  rung.cpu = r.cpu;
  rung.gpu = r.gpu;
  rung.counted = r.counted;
  rung.configs = {};
  rung.tuned_table = {};
  return run_kernel(rung, with_variant, "[" + r.name + "]");
}

namespace {

// The bytes a run must move at least: what it reads and writes once each. The forward reads Q, K
// and V and writes O and LSE; the backward reads Q, K, V, O, dO and LSE and writes dQ, dK and dV.
double run_bytes(const Problem& p, bool backward) {
  const double q = double(p.q_elements()), kv = double(p.kv_elements());
  return backward ? 2.0 * (4 * q + 4 * kv) + 4.0 * p.lse_elements()
                  : 2.0 * (2 * q + 2 * kv) + 4.0 * p.lse_elements();
}

// How many copies of a problem's buffers the timed runs rotate through: enough for three times the
// backend's L2 cache (at most 64), so that no run finds its inputs in L2 where the run before left
// them; 1 where the backend has no L2 to speak of (the CPU) or one run's bytes alone are that many.
// scripts/bench_torch.py's input_sets is the same rule, for SDPA's rows.
int input_sets(const Backend& be, double bytes) {
  const double l2 = double(be.l2_bytes());
  if (l2 <= 0 || bytes >= 3 * l2) return 1;
  return int(std::min(64.0, std::ceil(3 * l2 / bytes)));
}

// The timed runs: `warmup` untimed samples, then `iters` timed ones; the median sample, in
// milliseconds per run (0 when iters is 0). A sample runs the step once on every input set
// (input_sets: `dev` and copies of `in` at other addresses; a backward step's with copies of its
// dO, O and LSE, `bin`, and gradients of their own) between one pair of events and takes the
// mean, so that even a kernel of a few microseconds is timed over many back-to-back launches;
// with one set the L2 is flushed before each sample instead, outside the timed window. The forward
// and the backward are timed by the same rule (docs/benchmarking.md).
double time_runs(Backend& be, const Problem& p, const HostInputs& in, const BackwardInputs* bin,
                 const DeviceProblem& dev, StepFn run, RunContext& ctx, int warmup, int iters) {
  if (warmup + iters == 0) return 0;
  struct Copy {
    std::unique_ptr<DeviceProblem> problem;
    std::unique_ptr<DeviceBackward> grads;
  };
  std::vector<Copy> copies;
  for (int s = 1; s < input_sets(be, run_bytes(p, bin != nullptr)); ++s) {
    Copy c{std::make_unique<DeviceProblem>(be, p, in), nullptr};
    if (bin != nullptr) c.grads = std::make_unique<DeviceBackward>(be, p, *c.problem, *bin);
    copies.push_back(std::move(c));
  }
  struct Set {
    const AttentionParams* params;
    const RunContext::BackwardTensors* grads;  // null for a forward step
  };
  const RunContext::BackwardTensors* own = ctx.backward;
  std::vector<Set> sets = {{&dev.params(), own}};
  for (const Copy& c : copies)
    sets.push_back({&c.problem->params(), c.grads ? c.grads->tensors() : nullptr});
  auto sample = [&] {
    if (sets.size() == 1) be.flush_l2();
    return be.time_ms([&] {
      for (const Set& s : sets) {
        ctx.backward = s.grads;
        run(*s.params, ctx);
      }
    }) / double(sets.size());
  };
  for (int i = 0; i < warmup; ++i) sample();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) times.push_back(sample());
  ctx.backward = own;
  return times.empty() ? 0 : median(times);
}

// Why the step cannot take these options whatever the backend ("" if it can): a head dim it is not
// built for, a variant it does not have, --counters or --instrumented where it cannot run.
std::string refused(const StepInfo& step, const Options& opt) {
  const int dim = opt.problem.dim;
  if (!step.head_dims.empty() &&
      std::find(step.head_dims.begin(), step.head_dims.end(), dim) == step.head_dims.end())
    return step.name + ": --dim " + std::to_string(dim) + ": this step supports head dims " +
           join(step.head_dims);
  const auto& variants = step.variants;
  if (!opt.variant.empty() && variants.empty())
    return step.name + ": --variant " + opt.variant + ": this step has a single kernel";
  if (!opt.variant.empty() &&
      std::find(variants.begin(), variants.end(), opt.variant) == variants.end()) {
    std::string known;
    for (const std::string& v : variants) known += (known.empty() ? "" : ", ") + v;
    return step.name + ": --variant " + opt.variant + ": this step has variants " + known;
  }
  if (!opt.counters && !opt.instrumented) return "";
  const std::string flag = opt.counters ? "--counters" : "--instrumented";
  if (step.gpu == nullptr)
    return step.name + ": " + flag + ": this step runs no kernels (plain C++ on the CPU): " +
           (opt.counters ? "nothing to count" : "nothing to check");
  if (step.counted == nullptr)
    return step.name + ": " + flag + ": this binary has no counted copy of the kernels (" +
           "bin/counted/" + step.name + " has them; g++ builds it)";
  if (opt.backend == "gpu")
    return step.name + ": " + flag + " runs on the CPU backend (--backend cpu)";
  return "";
}

// The backend a run uses, or why none can (exit code 2): --backend, else the GPU where there is
// one and the step has a GPU kernel the build holds, else the CPU backend (with its schedule);
// --counters and --instrumented run on the CPU backend. Notes what it fell back from.
struct ChosenBackend {
  std::unique_ptr<Backend> be;
  std::string invalid;  // non-empty: no backend, and why
};

ChosenBackend choose_backend(const StepInfo& step, const Options& opt,
                             const std::function<void(const std::string&)>& note) {
  ChosenBackend out;
  std::unique_ptr<Backend>& be = out.be;
  auto refuse = [&](const std::string& why) {
    be.reset();
    out.invalid = why;
    return std::move(out);
  };
  std::string why_not;
  if (opt.backend == "gpu" || (opt.backend == "auto" && !opt.counters && !opt.instrumented)) {
    if (!gpu_backend_built())
      why_not = kBuiltWithoutToolkit;
    else if (step.gpu == nullptr)
      why_not = step.name + " runs on the CPU only";
    else
      be = make_gpu_backend(why_not, opt.gpu_device,
                            opt.device_arrays ? opt.device_arrays->stream : nullptr,
                            opt.device_arrays != nullptr);
    if (!be && opt.backend == "gpu") return refuse(step.name + ": --backend gpu: " + why_not);
    if (!be && step.cpu != nullptr && step.gpu != nullptr)
      note("note: " + why_not + "; running on the CPU backend");
  }
  if (!be && step.cpu == nullptr)
    return refuse(step.name + (opt.backend == "cpu" ? ": --backend cpu" : "") +
                  ": runs on a GPU only" + (why_not.empty() ? "" : ": " + why_not));
  auto use_cpu_backend = [&] {
    be.reset();  // a GPU backend first: it gives back the launch stream and the device it set
    be = make_cpu_backend();
    simt::set_schedule(simt::parse_schedule(opt.schedule));
  };
  if (!be) use_cpu_backend();
  // The compute capability the kernels see (on the CPU backend SIMT_PRESENT_AS may name one, and
  // SIMT_SMS its SM count: both are read, and refused if invalid, on every run), and the one the
  // step needs (StepInfo::min_arch).
  const bool on_gpu = be->name() == "gpu";
  ComputeCapability cc;
  try {
    cc = compute_capability(*be);
    if (!on_gpu) simt::sm_count();
  } catch (const std::invalid_argument& e) {
    return refuse(step.name + ": " + e.what());
  }
  if (!step.min_arch.empty() && step.gpu != nullptr) {
    ComputeCapability need;
    parse_compute_capability(step.min_arch, need);
    if (!cc.at_least(need.major, need.minor))
      return refuse(
          step.name + ": needs compute capability " + std::to_string(need.major) + "." +
          std::to_string(need.minor) + " (" + step.min_arch + ") or newer, for " +
          step.min_arch_why + "; " +
          (on_gpu ? "this GPU, " + be->device() + ", is " + cc.name() +
                        " (--backend cpu runs it on the CPU backend)"
                  : "the CPU backend presents itself as " + cc.name() + " (SIMT_PRESENT_AS)"));
  }
  // A GPU the step can run on, and a build without the step's GPU code (built for older GPUs
  // alone, e.g. CMAKE_CUDA_ARCHITECTURES=75): --backend gpu refuses; auto runs on the CPU backend
  // and says so.
  if (on_gpu && step.gpu == &gpu_not_built) {
    const std::string why = "this build has no GPU code for " + step.name +
                            " (CMAKE_CUDA_ARCHITECTURES holds nothing from " + step.min_arch +
                            " on)";
    if (opt.backend == "gpu") return refuse(step.name + ": --backend gpu: " + why);
    note("note: " + why + "; running on the CPU backend");
    use_cpu_backend();
  }
  return out;
}

// The inputs a run reads on the host, into `own` unless the caller's (Options::inputs) are used
// where they are: generated, loaded (--load), or the caller's device arrays copied back when they
// are checked (Options::device_arrays; none otherwise). Returns "" or why they are refused: NaN or
// Inf in given ones, or a scale that overflows on them.
std::string host_inputs(const StepInfo& step, const Options& opt, Backend& be, HostInputs& own,
                        const HostInputs*& in) {
  const Problem& p = opt.problem;
  in = opt.inputs != nullptr ? opt.inputs : &own;
  if (opt.device_arrays != nullptr) {
    if (!opt.check) return "";
    const Options::DeviceArrays& d = *opt.device_arrays;
    host_resize(own.q, p.q_elements(), "Q (host copy)");
    host_resize(own.k, p.kv_elements(), "K (host copy)");
    host_resize(own.v, p.kv_elements(), "V (host copy)");
    be.download(own.q.data(), d.q, own.q.size() * sizeof(Bits16));
    be.download(own.k.data(), d.k, own.k.size() * sizeof(Bits16));
    be.download(own.v.data(), d.v, own.v.size() * sizeof(Bits16));
  } else if (opt.inputs == nullptr && opt.load.empty()) {
    own = make_inputs(p);
  } else if (opt.inputs == nullptr) {
    if (std::string why = load_inputs(opt.load, p, own); !why.empty())
      return step.name + ": --load " + opt.load + ": " + why;
  }
  const bool given = opt.inputs != nullptr || opt.device_arrays != nullptr;
  if (given || !opt.load.empty()) {
    if (std::string why = check_finite(p, *in); !why.empty())
      return step.name + ": " + (given ? "" : "--load " + opt.load + ": ") + why;
  }
  if (std::string why = check_scale(p, *in); !why.empty()) return step.name + ": " + why;
  return "";
}

RunOutcome run_kernel(const StepInfo& step, const Options& opt, const std::string& rung) {
  RunOutcome out;
  const Problem& p = opt.problem;
  if (const std::string why = refused(step, opt); !why.empty()) return invalid(why);
  // Device arrays: on the GPU, or on the CPU backend in host memory (its device memory: the tests
  // run the in-place path there), once, with nothing saved, counted or instrumented.
  if (const Options::DeviceArrays* d = opt.device_arrays;
      d != nullptr &&
      (!(opt.backend == "gpu" || (opt.backend == "cpu" && d->stream == nullptr)) ||
       opt.iters != 0 || opt.warmup != 0 || !opt.save.empty() || opt.inputs != nullptr ||
       opt.backward_inputs != nullptr || opt.counters || opt.instrumented))
    throw std::logic_error(
        "run_step: device arrays run once (iters 0), on the GPU or in host memory on the CPU "
        "backend, with nothing saved, counted or instrumented");
  if (step.backward && !opt.save.empty())
    return invalid(step.name + ": --save " + opt.save +
                   ": not for the backward pass yet (its inputs and gradients are not saved)");
  if (const Options::DeviceArrays* d = opt.device_arrays;
      d != nullptr &&
      (d->dout != nullptr) + (d->dq != nullptr) + (d->dk != nullptr) + (d->dv != nullptr) !=
          (step.backward ? 4 : 0))
    throw std::logic_error(
        "run_step: a backward step's device arrays need dout, dq, dk and dv; a forward step's "
        "have none of them");
  if (opt.backward_inputs != nullptr && !step.backward)
    throw std::logic_error("run_step: backward inputs given to a forward step");
  // Notes go out at once when there is somewhere to print them, else with the outcome.
  auto note = [&](const std::string& line) {
    if (opt.notice)
      opt.notice(line);
    else
      out.message += (out.message.empty() ? "" : "\n") + line;
  };
  const auto& variants = step.variants;

  ChosenBackend chosen = choose_backend(step, opt, note);
  if (!chosen.be) return invalid(chosen.invalid);
  Backend* be = chosen.be.get();
  const bool on_gpu = be->name() == "gpu";
  const StepFn run = on_gpu ? step.gpu : step.cpu;
  // On the CPU a run measures the emulator, not a GPU, and may take minutes: one is enough.
  const int iters = opt.iters >= 0 ? opt.iters : (on_gpu ? 20 : 1);
  const int warmup = opt.warmup >= 0 ? opt.warmup : (on_gpu ? 2 : 0);
  std::unique_ptr<Progress> progress;
  if (!on_gpu && opt.show_progress) progress = std::make_unique<Progress>(step.name);
  // Options::interrupt: the CPU backend checks it at each block it starts, step 0 at each row
  // group it reports.
  struct InterruptHook {
    explicit InterruptHook(const std::atomic<bool>* flag) { simt::set_interrupt(flag); }
    ~InterruptHook() { simt::set_interrupt(nullptr); }
  } interrupt_hook(on_gpu ? nullptr : opt.interrupt);

  // The variant is part of the step's name in the result line and the CSV: "step5_x[sm80]"; an
  // earlier rung's name stands for its variant too: "step5_x[tma]".
  std::string variant = opt.variant;
  if (variant.empty() && !variants.empty())
    variant = step.default_variant ? step.default_variant(*be) : variants.front();
  if (step.variant_unavailable)
    if (const std::string why = step.variant_unavailable(*be, variant); !why.empty())
      return invalid(step.name + ": " + why);

  ResultRow& row = out.row;
  row.step = step.name + (variant.empty() || !rung.empty() ? "" : "[" + variant + "]") + rung;
  row.problem = p;
  row.iters = std::max(iters, 1);
  row.commit = build_commit();
  row.toolkit = cuda_toolkit_version();
  row.timestamp = now_utc();
  try {
    row.backend = be->name();
    row.device = be->device();
    row.driver = be->driver();
    row.sm_clock_mhz = be->sm_clock_mhz();
    row.schedule = on_gpu ? "" : opt.schedule;
    if (const std::string why = choose_config(step, opt, be->arch(), row); !why.empty())
      return invalid(why);

    HostInputs own;
    const HostInputs* given = nullptr;
    if (std::string why = host_inputs(step, opt, *be, own, given); !why.empty())
      return invalid(why);
    const HostInputs& in = *given;
    const std::unique_ptr<DeviceProblem> dev =
        opt.device_arrays ? std::make_unique<DeviceProblem>(*be, p, *opt.device_arrays,
                                                            opt.check && !step.backward)
                          : std::make_unique<DeviceProblem>(*be, p, in);
    const AttentionParams& params = dev->params();
    // Where step 0 reports its rows (RunContext::progress), declared first: it outlives ctx.
    auto report_rows = [&](uint64_t done, uint64_t total) {
      if (opt.interrupt && opt.interrupt->load()) throw std::runtime_error("interrupted");
      if (progress) progress->rows(done, total);
    };
    RunContext ctx(*be);
    ctx.config = row.config;
    ctx.variant = variant;
    // A backward step: its inputs on the backend beside the problem's, and the FP64 gradients.
    std::unique_ptr<DeviceBackward> bwd;
    ReferenceGrads grads_ref;
    BackwardInputs bin;
    if (step.backward) {
      if (std::string why = prepare_backward(step, opt, *be, in, *dev, bwd, bin, grads_ref);
          !why.empty())
        return invalid(why);
      ctx.backward = bwd->tensors();
      row.backward = true;
    }
    if (progress || opt.interrupt) ctx.progress = RunContext::Progress::of(report_rows);

    const double check_flops = step.backward ? p.backward_flops() : p.flops();
    if (opt.check && check_flops > kLongCheckFlops)
      note("note: the FP64 reference check needs " + std::to_string(int64_t(check_flops / 1e9)) +
           " GFLOP on the CPU, which can take minutes; --no-check skips it");

    // The checked run: outputs start poisoned, so anything left unwritten is caught. With
    // --counters it is the counted copy's, which counts what it does (and checks every access);
    // with --instrumented the counted copy's too, counting nothing. On the caller's device arrays
    // unchecked, the launch alone: the caller's stream orders what follows, nobody waits here.
    ctx.verify = true;
    double checked_ms = 0;  // the checked run's time: the row's time when iters is 0
    if (opt.instrumented) {
      checked_ms = be->time_ms([&] { step.counted(params, ctx); });
      row.instrumented = true;
    } else if (opt.counters) {
      simt::counters::start();
      try {
        step.counted(params, ctx);
      } catch (...) {
        simt::counters::stop();
        throw;
      }
      row.counters = simt::counters::stop();
      row.counted = true;
      row.model = speed_of_light(*find_gpu(opt.model_gpu), p, row.counters);
    } else if (opt.device_arrays && !opt.check) {
      run(params, ctx);
    } else {
      checked_ms = be->time_ms([&] { run(params, ctx); });
    }
    ctx.verify = false;
    if (step.backward && (opt.check || opt.keep_outputs)) {
      Gradients got = bwd->download();
      if (opt.check) {
        row.checked = true;
        row.grads =
            check_gradients(p, got, grads_ref, reference_backward_dtype(p, in, bin.dout, bin.o));
      }
      if (opt.keep_outputs) out.grads = std::move(got);
    }
    if (step.backward && opt.check) {
      row.check.passed = row.grads.passed;
      row.check.first_failure = row.grads.first_failure;
      for (const GradientCheck::Tensor& t : row.grads.tensors)
        row.check.max_abs_err = std::max(row.check.max_abs_err, t.max_err);
    } else if (!step.backward && (opt.check || !opt.save.empty() || opt.keep_outputs)) {
      std::vector<Bits16> o;
      std::vector<float> lse;
      dev->download(o, lse);
      if (!opt.save.empty()) {
        try {
          save_tensors(opt.save, step.name, p, in, o, lse);
        } catch (const std::runtime_error& e) {
          return invalid(step.name + ": --save " + opt.save + ": " + e.what());
        }
      }
      if (opt.check) {
        row.checked = true;
        row.check = check_outputs(p, o, lse, reference_attention(p, in));
      }
      if (opt.keep_outputs) out.o = std::move(o), out.lse = std::move(lse);
    }

    const double timed_ms =
        time_runs(*be, p, in, step.backward ? &bin : nullptr, *dev, run, ctx, warmup, iters);
    row.time_ms = iters == 0 ? checked_ms : timed_ms;
    const double flops = step.backward ? p.backward_flops() : p.flops();
    row.tflops = row.time_ms > 0 ? flops / (row.time_ms * 1e-3) / 1e12 : 0;
    out.ran = true;
  } catch (const OutOfMemory& e) {
    RunOutcome r = invalid(step.name + ": " + e.what());
    r.out_of_memory = true;
    return r;
  } catch (const std::bad_alloc&) {
    RunOutcome r = invalid(step.name + ": out of host memory (an allocation failed; " +
                           format_bytes(double(host_memory_available())) +
                           " available): make the problem smaller");
    r.out_of_memory = true;
    return r;
  } catch (const std::exception& e) {
    out.exit_code = 1;
    out.interrupted = opt.interrupt != nullptr && opt.interrupt->load();
    out.message = step.name + ": " + (out.interrupted ? "interrupted" : e.what());
    return out;
  }
  if (row.checked && !row.check.passed) out.exit_code = 1;
  return out;
}

}  // namespace

}  // namespace attn

namespace attn {
std::string cuda_toolkit_version() {
  return ATTN_CUDA_TOOLKIT_VERSION;
}
}  // namespace attn
