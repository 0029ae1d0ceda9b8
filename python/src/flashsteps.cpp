// flashsteps._core: the steps called from Python. Each call goes through the harness the step
// executables use (attn::run_step): the same validation and messages, the same backends, the same
// check against the FP64 reference and counters. What this file adds is the translation: DLPack
// arrays in, float32 NumPy arrays out, harness outcomes as Python exceptions, the GIL released
// while a step runs, and Ctrl-C turned into an interrupt of a CPU-backend run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/harness.h"
#include "common/memory.h"
#include "common/simt/launch.h"
#include "common/sol_model.h"
#include "common/steps.h"

namespace nb = nanobind;

namespace {

const std::vector<attn::StepInfo>& all_steps() {
  static const std::vector<attn::StepInfo> steps = [] {
    std::vector<attn::StepInfo> all = {attn::step0_info()};
    for (attn::StepInfo& s : attn::kernel_steps()) all.push_back(std::move(s));
    for (attn::StepInfo& s : attn::backward_steps()) all.push_back(std::move(s));
    return all;
  }();
  return steps;
}

const attn::StepInfo& find_step(const std::string& name) {
  std::string known;
  for (const auto& s : all_steps()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  throw nb::value_error(("unknown step '" + name + "' (the steps: " + known + ")").c_str());
}

nb::list steps() {
  nb::list out;
  for (const auto& s : all_steps()) {
    nb::dict d;
    d["name"] = s.name;
    d["kernels"] = s.gpu != nullptr;
    d["head_dims"] = s.head_dims;
    d["variants"] = s.variants;
    std::vector<std::string> configs;
    for (const auto& c : s.configs) configs.push_back(c.name);
    d["configs"] = configs;
    d["min_arch"] = s.min_arch;
    d["counted"] = s.counted != nullptr;
    d["backward"] = s.backward;
    std::vector<std::pair<std::string, std::string>> rungs;
    for (const auto& r : s.rungs) rungs.emplace_back(r.name, r.idea);
    d["rungs"] = rungs;
    out.append(d);
  }
  return out;
}

// float64 rounded to the 16-bit type at once (through float32 it could round twice).
attn::Bits16 bits_of_double(double v, attn::DType dtype) {
  if (dtype == attn::DType::fp16) return static_cast<__half_raw>(__double2half(v)).x;
  return static_cast<__nv_bfloat16_raw>(__double2bfloat16(v)).x;
}

// Raw 16-bit storage from an array of any strides: fp16 and bf16 as they are, float32 and float64
// rounded to `dtype` (round to nearest even, as attn::to_bits). Throws attn::OutOfMemory when the
// copy would not fit.
std::vector<attn::Bits16> bits_of(const char* name, const nb::ndarray<nb::ro>& a,
                                  attn::DType dtype) {
  const size_t n0 = a.shape(0), n1 = a.shape(1), n2 = a.shape(2), n3 = a.shape(3);
  std::vector<attn::Bits16> out;
  attn::host_resize(out, n0 * n1 * n2 * n3, std::string(name) + " (its 16-bit copy)");
  const nb::dlpack::dtype t = a.dtype();
  const auto* base = static_cast<const unsigned char*>(a.data());
  const size_t item = t.bits / 8;
  size_t x = 0;
  for (size_t i0 = 0; i0 < n0; ++i0)
    for (size_t i1 = 0; i1 < n1; ++i1)
      for (size_t i2 = 0; i2 < n2; ++i2)
        for (size_t i3 = 0; i3 < n3; ++i3, ++x) {
          const int64_t at = int64_t(i0) * a.stride(0) + int64_t(i1) * a.stride(1) +
                             int64_t(i2) * a.stride(2) + int64_t(i3) * a.stride(3);
          const unsigned char* p = base + at * int64_t(item);
          if (t.bits == 16) {
            std::memcpy(&out[x], p, 2);
          } else if (t.bits == 32) {
            float v;
            std::memcpy(&v, p, 4);
            out[x] = attn::to_bits(v, dtype);
          } else {
            double v;
            std::memcpy(&v, p, 8);
            out[x] = bits_of_double(v, dtype);
          }
        }
  return out;
}

std::string shape_of(const nb::ndarray<nb::ro>& a) {
  std::string s = "(";
  for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

// The dtype the kernels compute in: that of 16-bit inputs, or `requested` for float32/float64
// ones. Refuses anything else, and a `requested` that contradicts 16-bit inputs.
attn::DType input_dtype(const nb::ndarray<nb::ro>& q, const nb::ndarray<nb::ro>& k,
                        const nb::ndarray<nb::ro>& v, const std::optional<std::string>& requested) {
  using Code = nb::dlpack::dtype_code;
  auto kind = [](const nb::ndarray<nb::ro>& a, const char* name) -> std::string {
    const nb::dlpack::dtype t = a.dtype();
    if (t.lanes == 1 && t.code == uint8_t(Code::Float) && t.bits == 16) return "fp16";
    if (t.lanes == 1 && t.code == uint8_t(Code::Bfloat) && t.bits == 16) return "bf16";
    if (t.lanes == 1 && t.code == uint8_t(Code::Float) && (t.bits == 32 || t.bits == 64))
      return t.bits == 32 ? "float32" : "float64";
    throw nb::value_error((std::string(name) +
                           ": unsupported dtype (fp16, bf16, or float32/float64 with dtype='fp16' "
                           "or 'bf16')")
                              .c_str());
  };
  const std::string kq = kind(q, "q"), kk = kind(k, "k"), kv = kind(v, "v");
  if (kq != kk || kq != kv)
    throw nb::value_error(
        ("q, k and v must have one dtype: " + kq + ", " + kk + ", " + kv).c_str());
  if (kq == "fp16" || kq == "bf16") {
    if (requested && *requested != kq)
      throw nb::value_error(
          ("dtype='" + *requested + "' but q, k and v are " + kq + ": leave dtype out").c_str());
    return kq == "fp16" ? attn::DType::fp16 : attn::DType::bf16;
  }
  if (!requested)
    throw nb::value_error(("q, k and v are " + kq +
                           ": pass dtype='fp16' or 'bf16', the precision the kernels compute in "
                           "(the inputs are rounded to it)")
                              .c_str());
  const std::optional<attn::DType> t = attn::parse_dtype(*requested);
  if (!t) throw nb::value_error(("dtype='" + *requested + "': use 'fp16' or 'bf16'").c_str());
  return *t;
}

// Ctrl-C during a run: the handler sets the flag the CPU backend checks at each block (common/
// simt/launch.h); Python's own handler is put back when the run ends.
std::atomic<bool> g_interrupt{false};
extern "C" void on_sigint(int) {
  g_interrupt.store(true);
}

class SigintToInterrupt {
 public:
  explicit SigintToInterrupt(bool install) : installed_(install) {
    g_interrupt.store(false);
    if (!installed_) return;
    struct sigaction sa {};
    sa.sa_handler = &on_sigint;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &previous_);
  }
  ~SigintToInterrupt() {
    if (installed_) sigaction(SIGINT, &previous_, nullptr);
  }
  SigintToInterrupt(const SigintToInterrupt&) = delete;
  SigintToInterrupt& operator=(const SigintToInterrupt&) = delete;

 private:
  bool installed_;
  struct sigaction previous_ {};
};

// One run at a time in a process: the CPU backend's schedule, counters and interrupt flag are
// process-wide.
std::mutex g_run_mutex;

[[noreturn]] void raise(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw nb::python_error();
}

// The checks every array gets wherever it is: 4 dimensions, k and v of one shape, batch and head
// dim shared with q, no empty or oversized dimension.
void check_shapes(const nb::ndarray<nb::ro>& q, const nb::ndarray<nb::ro>& k,
                  const nb::ndarray<nb::ro>& v) {
  for (auto [name, a] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}})
    if (a->ndim() != 4)
      throw nb::value_error((std::string(name) + " has shape " + shape_of(*a) +
                             ": expected 4 dimensions (batch, heads, seqlen, head_dim)")
                                .c_str());
  if (k.shape(0) != q.shape(0) || k.shape(3) != q.shape(3))
    throw nb::value_error(("q has shape " + shape_of(q) + " and k " + shape_of(k) +
                           ": batch (dim 0) and head_dim (dim 3) must match")
                              .c_str());
  if (v.shape(0) != k.shape(0) || v.shape(1) != k.shape(1) || v.shape(2) != k.shape(2) ||
      v.shape(3) != k.shape(3))
    throw nb::value_error(
        ("k has shape " + shape_of(k) + " and v " + shape_of(v) + ": they must match").c_str());
  for (size_t d = 0; d < 4; ++d)
    if (q.shape(d) == 0 || k.shape(d) == 0)
      throw nb::value_error(("q has shape " + shape_of(q) + " and k " + shape_of(k) +
                             ": every dimension must be at least 1")
                                .c_str());
  for (size_t d = 0; d < 4; ++d)
    if (q.shape(d) > size_t(std::numeric_limits<int>::max()) ||
        k.shape(d) > size_t(std::numeric_limits<int>::max()))
      throw nb::value_error(
          ("q " + shape_of(q) + ", k " + shape_of(k) + ": a size beyond 2^31").c_str());
}

// What a call asks of the harness besides the arrays, as the step executables' flags would:
// the problem and the options, checked and refused in the executables' words.
struct Call {
  std::optional<std::string> dtype;
  bool causal = false;
  std::optional<float> scale;
  std::optional<std::vector<int>> seqlens_q, seqlens_k;
  float dropout = 0;
  uint64_t seed = 0;
  std::optional<std::string> rung, variant;
  std::string backend;
  int gpu_device = 0;
  std::string schedule;
  std::optional<std::string> config, tuned_table;
  bool check = false, counters = false;
  std::optional<std::string> model_gpu;
};

attn::Options options_for(const attn::StepInfo& step, const nb::ndarray<nb::ro>& q,
                          const nb::ndarray<nb::ro>& k, const nb::ndarray<nb::ro>& v,
                          const Call& c) {
  check_shapes(q, k, v);
  attn::Options opt;
  attn::Problem& p = opt.problem;
  p.dtype = input_dtype(q, k, v, c.dtype);
  p.batch = int(q.shape(0));
  p.heads = int(q.shape(1));
  p.seqlen_q = int(q.shape(2));
  p.dim = int(q.shape(3));
  p.heads_kv = int(k.shape(1));
  p.seqlen_k = int(k.shape(2));
  p.causal = c.causal;
  p.scale = c.scale;
  p.dropout = c.dropout;
  p.seed = c.seed;
  if (c.seqlens_q) p.seqlens_q = *c.seqlens_q;
  if (c.seqlens_k) p.seqlens_k = *c.seqlens_k;
  // The step executables' checks and messages (common/cli.cpp), in the same words.
  auto refuse = [&](const std::string& why) { raise(PyExc_ValueError, step.name + ": " + why); };
  if (const std::string why = attn::validate(p); !why.empty()) refuse(why);
  try {
    simt::parse_schedule(c.schedule);
  } catch (const std::invalid_argument& e) {
    refuse(std::string("--schedule: ") + e.what());
  }
  if (c.model_gpu && !c.counters) refuse("--model-gpu models a counted run: add --counters");
  opt.model_gpu = c.model_gpu.value_or(opt.model_gpu);
  if (!attn::find_gpu(opt.model_gpu)) {
    std::string known;
    for (const attn::GpuSpec& g : attn::model_gpus()) known += (known.empty() ? "" : ", ") + g.name;
    refuse("--model-gpu " + opt.model_gpu + ": not a GPU the model knows (" + known + ")");
  }
  if (c.counters && step.gpu != nullptr && step.counted == nullptr)
    refuse(
        "--counters: this build of flashsteps has no counted copy of the kernels (they need "
        "g++ and ATTN_COUNTERS=ON: pip install . -C cmake.define.ATTN_COUNTERS=ON)");
  opt.backend = c.backend;
  opt.gpu_device = c.gpu_device;
  opt.schedule = c.schedule;
  opt.variant = c.variant.value_or("");
  opt.rung = c.rung.value_or("");
  opt.config = c.config.value_or("");
  opt.tuned_table = c.tuned_table.value_or("");
  opt.check = c.check;
  opt.counters = c.counters;
  opt.iters = 0;  // the checked run alone
  opt.warmup = 0;
  return opt;
}

// The harness's outcome as Python sees it: an exception, or nothing for a run that passed.
void raise_for(const attn::StepInfo& step, const attn::RunOutcome& r, bool handle_sigint) {
  if (r.interrupted) raise(PyExc_KeyboardInterrupt, r.message);
  // Ctrl-C where the run does not look (the FP64 check, a GPU run, the last block): Python would
  // have raised it when the call returned, and so does this.
  if (handle_sigint && g_interrupt.load())
    raise(PyExc_KeyboardInterrupt, step.name + ": interrupted (Ctrl-C)");
  if (r.exit_code == 2) raise(r.out_of_memory ? PyExc_MemoryError : PyExc_ValueError, r.message);
  if (!r.ran) raise(PyExc_RuntimeError, r.message);
  if (r.row.checked && !r.row.check.passed)
    raise(PyExc_RuntimeError,
          r.row.step + ": check against the FP64 reference FAILED: " + r.row.check.first_failure);
}

// A run as every entry point makes it: the GIL released, one run at a time, Ctrl-C an interrupt
// of a CPU-backend run when `handle_sigint`; an outcome that did not pass raised (raise_for).
attn::RunOutcome run_released(const attn::StepInfo& step, const attn::Options& opt,
                              bool handle_sigint) {
  attn::RunOutcome r;
  {
    nb::gil_scoped_release no_gil;
    std::lock_guard lock(g_run_mutex);
    SigintToInterrupt sigint(handle_sigint);
    r = attn::run_step(step, opt);
  }
  raise_for(step, r, handle_sigint);
  return r;
}

// A float32 NumPy array of `shape` that owns `data`.
nb::ndarray<nb::numpy, float> numpy_array(std::unique_ptr<float[]> data,
                                          std::initializer_list<size_t> shape) {
  nb::capsule owner(data.release(), [](void* ptr) noexcept { delete[] static_cast<float*>(ptr); });
  return nb::ndarray<nb::numpy, float>(owner.data(), shape.size(), shape.begin(), owner);
}

// 16-bit values as float32 (every fp16 and bf16 value is one exactly), in a NumPy array.
nb::ndarray<nb::numpy, float> numpy_of_bits(const std::vector<attn::Bits16>& t, attn::DType dtype,
                                            std::initializer_list<size_t> shape) {
  auto data = std::make_unique<float[]>(t.size());
  for (size_t x = 0; x < t.size(); ++x) data[x] = attn::from_bits(t[x], dtype);
  return numpy_array(std::move(data), shape);
}

nb::dict row_of(const attn::RunOutcome& r) {
  nb::dict row;
  const std::vector<std::string> fields = attn::csv_fields(r.row);
  for (size_t i = 0; i < fields.size(); ++i) row[attn::csv_columns()[i].c_str()] = fields[i];
  return row;
}

nb::tuple run(const std::string& step_name, const nb::ndarray<nb::ro>& q,
              const nb::ndarray<nb::ro>& k, const nb::ndarray<nb::ro>& v,
              const std::optional<std::string>& dtype, bool causal, std::optional<float> scale,
              std::optional<std::vector<int>> seqlens_q, std::optional<std::vector<int>> seqlens_k,
              float dropout, uint64_t seed, const std::optional<std::string>& rung,
              const std::optional<std::string>& variant, const std::string& schedule,
              const std::optional<std::string>& config,
              const std::optional<std::string>& tuned_table, bool check, bool counters,
              const std::optional<std::string>& model_gpu, bool handle_sigint) {
  const attn::StepInfo& step = find_step(step_name);
  if (step.backward)
    throw nb::value_error((step.name +
                           " is the backward pass: flashsteps.attention_backward runs it, on the "
                           "forward's outputs")
                              .c_str());
  for (auto [name, a] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}})
    if (a->device_type() != nb::device::cpu::value)
      throw nb::value_error((std::string(name) +
                             ": the array must be in host memory here (CUDA arrays go to "
                             "run_cuda, which flashsteps.attention calls for them)")
                                .c_str());
  attn::Options opt = options_for(
      step, q, k, v,
      {dtype, causal, scale, std::move(seqlens_q), std::move(seqlens_k), dropout, seed, rung,
       variant, "cpu", 0, schedule, config, tuned_table, check, counters, model_gpu});
  const attn::Problem& p = opt.problem;
  opt.keep_outputs = true;
  opt.interrupt = &g_interrupt;

  attn::HostInputs in;
  try {
    in.q = bits_of("q", q, p.dtype);
    in.k = bits_of("k", k, p.dtype);
    in.v = bits_of("v", v, p.dtype);
  } catch (const attn::OutOfMemory& e) {
    raise(PyExc_MemoryError, step.name + ": " + e.what());
  }
  opt.inputs = &in;

  const attn::RunOutcome r = run_released(step, opt, handle_sigint);

  // O as float32, LSE as it is.
  const size_t B = size_t(p.batch), H = size_t(p.heads), Sq = size_t(p.seqlen_q);
  auto lse = std::make_unique<float[]>(B * H * Sq);
  std::memcpy(lse.get(), r.lse.data(), B * H * Sq * sizeof(float));
  return nb::make_tuple(numpy_of_bits(r.o, p.dtype, {B, H, Sq, size_t(p.dim)}),
                        numpy_array(std::move(lse), {B, H, Sq}), row_of(r), r.message);
}

// An array of the backward's beside q: in host memory, of `shape`, and of q's kind (the same 16-bit
// type, or float32/float64, rounded to the kernels' dtype); lse float32 alone.
void check_beside(const char* name, const nb::ndarray<nb::ro>& a, const std::vector<size_t>& shape,
                  const nb::ndarray<nb::ro>& q, bool fp32_only) {
  if (a.device_type() != nb::device::cpu::value)
    throw nb::value_error((std::string(name) + ": the array must be in host memory").c_str());
  bool same = a.ndim() == shape.size();
  for (size_t i = 0; same && i < shape.size(); ++i) same = a.shape(i) == shape[i];
  if (!same) {
    std::string want = "(";
    for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
    throw nb::value_error((std::string(name) + " has shape " + shape_of(a) + ": expected " + want +
                           (shape.size() == 4 ? ")" : "), float32: the forward's LSE"))
                              .c_str());
  }
  const nb::dlpack::dtype t = a.dtype(), tq = q.dtype();
  const bool is_float = t.lanes == 1 && t.code == uint8_t(nb::dlpack::dtype_code::Float);
  // With float32/float64 q (rounded to `dtype`), o and dout may be either: flashsteps.attention
  // returns float32 o for float64 q.
  const bool ok = fp32_only       ? is_float && t.bits == 32
                  : tq.bits == 16 ? t.lanes == 1 && t.code == tq.code && t.bits == 16
                                  : is_float && (t.bits == 32 || t.bits == 64);
  if (!ok)
    throw nb::value_error((std::string(name) + ": expected " +
                           (fp32_only       ? std::string("float32 (the forward's LSE)")
                            : tq.bits == 16 ? "the dtype of q"
                                            : "float32 or float64, as q"))
                              .c_str());
}

nb::tuple backward(const std::string& step_name, const nb::ndarray<nb::ro>& q,
                   const nb::ndarray<nb::ro>& k, const nb::ndarray<nb::ro>& v,
                   const std::optional<nb::ndarray<nb::ro>>& o,
                   const std::optional<nb::ndarray<nb::ro>>& lse,
                   const std::optional<nb::ndarray<nb::ro>>& dout,
                   const std::optional<std::string>& dtype, bool causal, std::optional<float> scale,
                   std::optional<std::vector<int>> seqlens_q,
                   std::optional<std::vector<int>> seqlens_k, float dropout, uint64_t seed,
                   const std::optional<std::string>& variant, const std::string& schedule,
                   bool check, bool handle_sigint) {
  const attn::StepInfo& step = find_step(step_name);
  if (!step.backward)
    throw nb::value_error((step.name + " is a forward step: flashsteps.attention runs it").c_str());
  for (auto [name, a] : {std::pair{"o", &o}, {"lse", &lse}, {"dout", &dout}})
    if (!a->has_value())
      throw nb::value_error((step.name + ": " + name +
                             " is missing: the backward reads the forward's O and LSE and the "
                             "upstream gradient dO")
                                .c_str());
  for (auto [name, a] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}})
    if (a->device_type() != nb::device::cpu::value)
      throw nb::value_error((std::string(name) +
                             ": the array must be in host memory here (CUDA arrays go to "
                             "run_cuda, which flashsteps.attention_backward calls for them)")
                                .c_str());
  attn::Options opt = options_for(step, q, k, v,
                                  {dtype, causal, scale, std::move(seqlens_q), std::move(seqlens_k),
                                   dropout, seed, std::nullopt, variant, "cpu", 0, schedule,
                                   std::nullopt, std::nullopt, check, false, std::nullopt});
  const attn::Problem& p = opt.problem;
  const std::vector<size_t> q_shape = {q.shape(0), q.shape(1), q.shape(2), q.shape(3)};
  check_beside("o", *o, q_shape, q, false);
  check_beside("dout", *dout, q_shape, q, false);
  check_beside("lse", *lse, {q.shape(0), q.shape(1), q.shape(2)}, q, true);
  opt.keep_outputs = true;
  opt.interrupt = &g_interrupt;

  attn::HostInputs in;
  attn::BackwardInputs given;
  try {
    in.q = bits_of("q", q, p.dtype);
    in.k = bits_of("k", k, p.dtype);
    in.v = bits_of("v", v, p.dtype);
    given.o = bits_of("o", *o, p.dtype);
    given.dout = bits_of("dout", *dout, p.dtype);
    attn::host_resize(given.lse, p.lse_elements(), "lse (host copy)");
    const nb::ndarray<nb::ro>& l = *lse;
    size_t x = 0;
    for (size_t i0 = 0; i0 < l.shape(0); ++i0)
      for (size_t i1 = 0; i1 < l.shape(1); ++i1)
        for (size_t i2 = 0; i2 < l.shape(2); ++i2, ++x)
          std::memcpy(&given.lse[x],
                      static_cast<const unsigned char*>(l.data()) +
                          4 * (int64_t(i0) * l.stride(0) + int64_t(i1) * l.stride(1) +
                               int64_t(i2) * l.stride(2)),
                      4);
  } catch (const attn::OutOfMemory& e) {
    raise(PyExc_MemoryError, step.name + ": " + e.what());
  }
  opt.inputs = &in;
  opt.backward_inputs = &given;

  const attn::RunOutcome r = run_released(step, opt, handle_sigint);

  const size_t B = size_t(p.batch), D = size_t(p.dim);
  return nb::make_tuple(
      numpy_of_bits(r.grads.dq, p.dtype, {B, size_t(p.heads), size_t(p.seqlen_q), D}),
      numpy_of_bits(r.grads.dk, p.dtype, {B, size_t(p.kv_heads()), size_t(p.seqlen_k), D}),
      numpy_of_bits(r.grads.dv, p.dtype, {B, size_t(p.kv_heads()), size_t(p.seqlen_k), D}),
      row_of(r), r.message);
}

// A CUDA array as the kernels take it in place: the expected shape, on q's device, C-contiguous
// (the layouts of AttentionParams) and at an address that is a multiple of 16 bytes (the kernels'
// vector loads, cp.async and TMA need it). flashsteps.attention copies an array that is not, once,
// on its device.
template <typename A>
void check_in_place(const char* name, const A& a, const std::vector<size_t>& shape, int device_id) {
  std::string want = "(";
  for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
  want += ")";
  bool same = a.ndim() == shape.size();
  for (size_t i = 0; same && i < shape.size(); ++i) same = a.shape(i) == shape[i];
  if (!same) throw nb::value_error((std::string(name) + ": expected shape " + want).c_str());
  if (a.device_type() != nb::device::cuda::value || a.device_id() != device_id)
    throw nb::value_error((std::string(name) + ": expected an array on cuda:" +
                           std::to_string(device_id) + ", the device of q")
                              .c_str());
  int64_t stride = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != stride)
      throw nb::value_error((std::string(name) +
                             ": not C-contiguous (flashsteps.attention copies such an array once "
                             "on its device)")
                                .c_str());
    stride *= int64_t(a.shape(i));
  }
  if (reinterpret_cast<uintptr_t>(a.data()) % 16 != 0)
    throw nb::value_error((std::string(name) +
                           ": its address is not a multiple of 16 bytes (flashsteps.attention "
                           "copies such an array once on its device)")
                              .c_str());
}

// The GPU build on CUDA arrays in place: the step reads q, k, v where they are and writes o and
// lse, launched on `stream` (the caller's framework's current stream, as an integer) and not
// waited for, unless `check`.
nb::dict run_cuda(const std::string& step_name, const nb::ndarray<nb::ro>& q,
                  const nb::ndarray<nb::ro>& k, const nb::ndarray<nb::ro>& v, nb::ndarray<> o,
                  nb::ndarray<float> lse, uintptr_t stream, const std::optional<std::string>& dtype,
                  bool causal, std::optional<float> scale,
                  std::optional<std::vector<int>> seqlens_q,
                  std::optional<std::vector<int>> seqlens_k, float dropout, uint64_t seed,
                  const std::optional<std::string>& rung, const std::optional<std::string>& variant,
                  const std::optional<std::string>& config,
                  const std::optional<std::string>& tuned_table, bool check,
                  const std::optional<nb::ndarray<nb::ro>>& dout,
                  const std::optional<nb::ndarray<>>& dq, const std::optional<nb::ndarray<>>& dk,
                  const std::optional<nb::ndarray<>>& dv) {
  const attn::StepInfo& step = find_step(step_name);
  if (q.device_type() != nb::device::cuda::value)
    throw nb::value_error("q: run_cuda takes CUDA arrays (run takes host arrays)");
  // A backward step reads o, lse and dout and writes dq, dk and dv; a forward step has none of
  // the last four.
  for (auto [name, given] : {std::pair{"dout", dout.has_value()},
                             {"dq", dq.has_value()},
                             {"dk", dk.has_value()},
                             {"dv", dv.has_value()}})
    if (given != step.backward)
      throw nb::value_error((step.name + ": " + name +
                             (step.backward ? " is missing: a backward step reads o, lse and dout "
                                              "and writes dq, dk and dv"
                                            : ": a forward step takes no gradients"))
                                .c_str());
  attn::Options opt = options_for(step, q, k, v,
                                  {dtype, causal, scale, std::move(seqlens_q), std::move(seqlens_k),
                                   dropout, seed, rung, variant, "gpu", int(q.device_id()),
                                   "forward", config, tuned_table, check, false, std::nullopt});
  if (!attn::gpu_backend_built())
    throw nb::value_error((step.name +
                           ": q is a CUDA array, and this build of flashsteps has no "
                           "GPU code (" +
                           attn::kBuiltWithoutToolkit + "): pass host arrays")
                              .c_str());
  const attn::Problem& p = opt.problem;
  const size_t B = size_t(p.batch), H = size_t(p.heads), Hkv = size_t(p.kv_heads()),
               Sq = size_t(p.seqlen_q), Sk = size_t(p.seqlen_k), D = size_t(p.dim);
  const int dev = int(q.device_id());
  check_in_place("q", q, {B, H, Sq, D}, dev);
  check_in_place("k", k, {B, Hkv, Sk, D}, dev);
  check_in_place("v", v, {B, Hkv, Sk, D}, dev);
  check_in_place("o", o, {B, H, Sq, D}, dev);
  check_in_place("lse", lse, {B, H, Sq}, dev);
  if (step.backward) {
    check_in_place("dout", *dout, {B, H, Sq, D}, dev);
    check_in_place("dq", *dq, {B, H, Sq, D}, dev);
    check_in_place("dk", *dk, {B, Hkv, Sk, D}, dev);
    check_in_place("dv", *dv, {B, Hkv, Sk, D}, dev);
  }
  // The kernels read 16-bit storage: float32/float64 arrays are rounded by flashsteps.attention
  // first (on the device), never taken here.
  using Code = nb::dlpack::dtype_code;
  const nb::dlpack::dtype sixteen{
      uint8_t(p.dtype == attn::DType::fp16 ? Code::Float : Code::Bfloat), 16, 1};
  std::vector<std::pair<const char*, nb::dlpack::dtype>> sixteen_bit = {
      {"q", q.dtype()}, {"k", k.dtype()}, {"v", v.dtype()}, {"o", o.dtype()}};
  if (step.backward)
    sixteen_bit.insert(
        sixteen_bit.end(),
        {{"dout", dout->dtype()}, {"dq", dq->dtype()}, {"dk", dk->dtype()}, {"dv", dv->dtype()}});
  for (auto [name, t] : sixteen_bit)
    if (t != sixteen)
      throw nb::value_error((std::string(name) + ": expected " + attn::dtype_name(p.dtype) +
                             " (run_cuda takes 16-bit arrays; flashsteps.attention rounds wider "
                             "ones on the device)")
                                .c_str());
  attn::Options::DeviceArrays arrays{q.data(), k.data(),   v.data(),
                                     o.data(), lse.data(), reinterpret_cast<void*>(stream)};
  if (step.backward)
    arrays.dout = dout->data(), arrays.dq = dq->data(), arrays.dk = dk->data(),
    arrays.dv = dv->data();
  opt.device_arrays = &arrays;

  const attn::RunOutcome r = run_released(step, opt, false);
  return row_of(r);
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() =
      "The steps of FlashAttention in six steps, called through the harness the step "
      "executables use (flashsteps.attention wraps run with DLPack arrays).";
  m.def("steps", &steps,
        "The steps, each a dict: name, kernels (False: plain C++), head_dims, variants, configs, "
        "min_arch, counted (a counted copy is built), rungs [(name, idea)].");
  m.def("run", &run, nb::arg("step"), nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::kw_only(),
        nb::arg("dtype").none() = nb::none(), nb::arg("causal") = false,
        nb::arg("scale").none() = nb::none(), nb::arg("seqlens_q").none() = nb::none(),
        nb::arg("seqlens_k").none() = nb::none(), nb::arg("dropout") = 0.0f, nb::arg("seed") = 0,
        nb::arg("rung").none() = nb::none(), nb::arg("variant").none() = nb::none(),
        nb::arg("schedule") = "forward", nb::arg("config").none() = nb::none(),
        nb::arg("tuned_table").none() = nb::none(), nb::arg("check") = false,
        nb::arg("counters") = false, nb::arg("model_gpu").none() = nb::none(),
        nb::arg("handle_sigint") = false,
        "Runs a step on host arrays q (B, H, Sq, D), k and v (B, Hkv, Sk, D). Returns (o, lse, "
        "row, notes): o float32 (B, H, Sq, D), lse float32 (B, H, Sq), row the result row's CSV "
        "fields (str), notes the harness's notes. Raises ValueError for invalid input, "
        "MemoryError for a problem that does not fit, RuntimeError for a failed check or a "
        "fault, KeyboardInterrupt when handle_sigint and Ctrl-C stops the run.");
  m.def("backward", &backward, nb::arg("step"), nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("o").none(), nb::arg("lse").none(), nb::arg("dout").none(), nb::kw_only(),
        nb::arg("dtype").none() = nb::none(), nb::arg("causal") = false,
        nb::arg("scale").none() = nb::none(), nb::arg("seqlens_q").none() = nb::none(),
        nb::arg("seqlens_k").none() = nb::none(), nb::arg("dropout") = 0.0f, nb::arg("seed") = 0,
        nb::arg("variant").none() = nb::none(), nb::arg("schedule") = "forward",
        nb::arg("check") = false, nb::arg("handle_sigint") = false,
        "Runs a backward step on host arrays q (B, H, Sq, D), k and v (B, Hkv, Sk, D), the "
        "forward's o (B, H, Sq, D) and lse (B, H, Sq, float32), and the upstream gradient dout "
        "(B, H, Sq, D). Returns (dq, dk, dv, row, notes): float32 arrays of q's, k's and v's "
        "shapes, the result row's CSV fields and the harness's notes. Raises ValueError for "
        "invalid input, MemoryError for a problem that does not fit, RuntimeError for a failed "
        "check.");
  m.def("run_cuda", &run_cuda, nb::arg("step"), nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("o").noconvert(), nb::arg("lse").noconvert(), nb::kw_only(), nb::arg("stream"),
        nb::arg("dtype").none() = nb::none(), nb::arg("causal") = false,
        nb::arg("scale").none() = nb::none(), nb::arg("seqlens_q").none() = nb::none(),
        nb::arg("seqlens_k").none() = nb::none(), nb::arg("dropout") = 0.0f, nb::arg("seed") = 0,
        nb::arg("rung").none() = nb::none(), nb::arg("variant").none() = nb::none(),
        nb::arg("config").none() = nb::none(), nb::arg("tuned_table").none() = nb::none(),
        nb::arg("check") = false, nb::arg("dout").none() = nb::none(),
        nb::arg("dq").none() = nb::none(), nb::arg("dk").none() = nb::none(),
        nb::arg("dv").none() = nb::none(),
        "Runs a step's GPU kernels in place on CUDA arrays: reads q (B, H, Sq, D), k and v (B, "
        "Hkv, Sk, D), fp16 or bf16, and writes o (like q) and lse (float32, (B, H, Sq)), each "
        "C-contiguous and 16-byte aligned on q's device; launched on `stream` (a cudaStream_t as "
        "an integer, 0 the default stream) and not waited for unless check. A backward step "
        "reads o, lse (the forward's) and dout (like q) and writes dq (like q), dk and dv (like "
        "k). Returns the result row's CSV fields. Raises as run does.");
  m.def(
      "flops",
      [](int batch, int heads, int seqlen_q, int seqlen_k, int dim, bool causal) {
        attn::Problem p;
        p.batch = batch, p.heads = heads, p.seqlen_q = seqlen_q, p.seqlen_k = seqlen_k;
        p.dim = dim, p.causal = causal;
        return p.flops();
      },
      nb::arg("batch"), nb::arg("heads"), nb::arg("seqlen_q"), nb::arg("seqlen_k"), nb::arg("dim"),
      nb::arg("causal"),
      "The FLOPs the harness counts for a problem (attn::Problem::flops: 4 * dim per visible "
      "score, the causal mask aligned bottom-right), as the result rows' TFLOPS use.");
  m.attr("gpu_built") = attn::gpu_backend_built();
  m.attr("cuda_architectures") = std::string(ATTN_CUDA_ARCHITECTURES);
  m.attr("commit") = attn::build_commit();
  m.attr("cuda_toolkit") = attn::cuda_toolkit_version();
}
