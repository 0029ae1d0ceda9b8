#include "common/report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace attn {

const std::vector<std::string>& csv_columns() {
  static const std::vector<std::string> cols = {
      "step", "backend", "device", "dtype", "batch", "heads", "heads_kv", "seqlen_q", "seqlen_k",
      "seqlens_k", "dim", "causal", "dropout", "scale", "seed", "iters", "time_ms", "tflops",
      "flops", "max_abs_err", "lse_max_err", "checked", "passed", "schedule", "config", "commit",
      "toolkit", "driver", "sm_clock_mhz", "timestamp",
      // --counters (empty otherwise): common/simt/counters.h, docs/profiling.md
      "counted", "gld_requests", "gld_sectors", "gld_bytes", "gst_requests", "gst_sectors",
      "gst_bytes", "ldgsts_requests", "ldgsts_sectors", "ldgsts_bytes", "tma_copies", "tma_sectors",
      "tma_bytes", "dram_bytes_min", "global_bytes_moved", "lds_wavefronts", "lds_conflicts",
      "sts_wavefronts", "sts_conflicts", "ldsm_wavefronts", "ldsm_conflicts", "ldgsts_conflicts",
      "mma", "wgmma", "tensor_flops", "tensor_share", "block_barriers", "named_barriers",
      "mbarrier_ops", "shuffles", "votes",
      // the speed-of-light model of the counted run (a model, not a measurement)
      "model_gpu", "model_us", "model_bound"};
  return cols;
}

namespace {

std::string num(double v, int precision = 6) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", precision, v);
  return buf;
}

}  // namespace

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::vector<std::string> csv_fields(const ResultRow& r) {
  const Problem& p = r.problem;
  std::string lens;
  for (size_t b = 0; b < p.seqlens_k.size(); ++b)
    lens += (b ? ";" : "") + std::to_string(p.seqlens_k[b]);
  std::vector<std::string> fields = {r.step,
                                     r.backend,
                                     r.device,
                                     dtype_name(p.dtype),
                                     std::to_string(p.batch),
                                     std::to_string(p.heads),
                                     std::to_string(p.kv_heads()),
                                     std::to_string(p.seqlen_q),
                                     std::to_string(p.seqlen_k),
                                     lens,
                                     std::to_string(p.dim),
                                     p.causal ? "1" : "0",
                                     num(p.dropout),
                                     num(p.softmax_scale(), 9),
                                     std::to_string(p.seed),
                                     std::to_string(r.iters),
                                     num(r.time_ms, 8),
                                     num(r.tflops, 8),
                                     num(r.backward ? p.backward_flops() : p.flops(), 12),
                                     r.checked ? num(r.check.max_abs_err, 4) : "",
                                     r.checked && !r.backward ? num(r.check.lse_max_err, 4) : "",
                                     r.checked ? "1" : "0",
                                     r.checked ? (r.check.passed ? "1" : "0") : "",
                                     r.schedule,
                                     r.config,
                                     r.commit,
                                     r.toolkit,
                                     r.driver,
                                     std::to_string(r.sm_clock_mhz),
                                     r.timestamp};
  if (!r.counted) {
    fields.resize(csv_columns().size());
    fields[30] = "0";
    return fields;
  }
  const simt::counters::Counts& c = r.counters.total;
  uint64_t distinct = 0, moved = 0;
  for (const auto& b : r.counters.buffers) distinct += b.distinct, moved += b.moved;
  auto u = [](uint64_t v) { return std::to_string(v); };
  const double flops = r.backward ? p.backward_flops() : p.flops();  // the tensor share's whole
  for (const std::string& f : {std::string("1"),
                               u(c.gld_requests),
                               u(c.gld_sectors),
                               u(c.gld_bytes),
                               u(c.gst_requests),
                               u(c.gst_sectors),
                               u(c.gst_bytes),
                               u(c.ldgsts_requests),
                               u(c.ldgsts_sectors),
                               u(c.ldgsts_bytes),
                               u(c.tma_copies),
                               u(c.tma_sectors),
                               u(c.tma_bytes),
                               u(distinct),
                               u(moved),
                               u(c.lds_wavefronts),
                               u(c.lds_conflicts()),
                               u(c.sts_wavefronts),
                               u(c.sts_conflicts()),
                               u(c.ldsm_wavefronts),
                               u(c.ldsm_conflicts()),
                               u(c.ldgsts_conflicts()),
                               u(c.mma),
                               u(c.wgmma),
                               num(c.tensor_flops, 12),
                               num(c.tensor_flops / flops, 4),
                               u(c.block_barriers),
                               u(c.named_barriers),
                               u(c.mbarrier_ops),
                               u(c.shuffles),
                               u(c.votes),
                               r.model.gpu ? r.model.gpu->name : "",
                               num(r.model.us, 6),
                               r.model.binding})
    fields.push_back(f);
  return fields;
}

std::string append_csv(const std::string& path, const ResultRow& r) {
  auto join = [](const std::vector<std::string>& fields) {
    std::string line;
    for (size_t i = 0; i < fields.size(); ++i) line += (i ? "," : "") + csv_escape(fields[i]);
    return line;
  };
  const std::string header = join(csv_columns());
  bool need_header = true;
  {
    std::ifstream in(path);
    std::string first;
    if (in && std::getline(in, first)) {
      if (first != header)
        return "--csv " + path + ": existing file has a different header; use a new file";
      need_header = false;
    }
  }
  std::ofstream out(path, std::ios::app);
  if (!out) return "--csv " + path + ": cannot open for writing";
  if (need_header) out << header << "\n";
  out << join(csv_fields(r)) << "\n";
  if (!out) return "--csv " + path + ": write failed";
  return "";
}

std::string format_result(const ResultRow& r) {
  std::ostringstream os;
  os << r.step << " [" << r.backend << ": " << r.device << "] " << r.problem.describe();
  if (!r.config.empty()) os << " config " << r.config << " (" << r.config_source << ")";
  os << "\n  ";
  os << "time " << num(r.time_ms, 4) << " ms (median of " << r.iters << "), " << num(r.tflops, 4)
     << " TFLOPS";
  if (r.backend != "gpu") os << " (CPU, not GPU performance)";
  if (r.instrumented) os << ", every access of the checked run checked (--instrumented)";
  if (!r.checked) {
    os << ", check skipped (--no-check)";
  } else if (r.backward) {
    for (const GradientCheck::Tensor& t : r.grads.tensors)
      os << ", max|" << t.name << "-ref| " << num(t.max_err, 3) << " (limit " << num(t.limit, 3)
         << ")";
    os << ": check " << (r.grads.passed ? "PASSED" : "FAILED");
    if (!r.grads.passed) os << "\n  first: " << r.grads.first_failure;
  } else {
    const Tolerance t = tolerance_for(r.problem.dtype);
    if (r.check.nonfinite_o + r.check.nonfinite_lse > 0)  // max|err| covers finite values only
      os << ", " << r.check.nonfinite_o << " O and " << r.check.nonfinite_lse
         << " LSE elements NaN or Inf";
    os << ", max|O-ref| " << num(r.check.max_abs_err, 3) << " (tol " << t.atol << " + " << t.rtol
       << "*|ref|), max|LSE-ref| " << num(r.check.lse_max_err, 3) << ": check "
       << (r.check.passed ? "PASSED" : "FAILED");
    if (!r.check.passed) {
      os << "\n  " << r.check.bad_o << " O and " << r.check.bad_lse
         << " LSE elements outside the tolerance";
      if (r.check.unwritten > 0)
        os << "; " << r.check.unwritten_o << " O and " << r.check.unwritten_lse
           << " LSE elements never written (still the poison the outputs start as)";
      os << "; first: " << r.check.first_failure;
    }
  }
  return os.str();
}

namespace {

// 12345678 -> "12,345,678"
std::string grouped(uint64_t v) {
  std::string s = std::to_string(v);
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return s;
}

std::string pct(double part, double whole) {
  return whole > 0 ? num(100.0 * part / whole, 3) + "%" : "-";
}

std::string mib(uint64_t bytes) {
  return num(double(bytes) / (1024.0 * 1024.0), 3) + " MiB";
}

}  // namespace

std::string format_counters(const ResultRow& r) {
  if (!r.counted) return "";
  const simt::counters::Report& rep = r.counters;
  const simt::counters::Counts& c = rep.total;
  std::ostringstream os;
  os << "counters: counted on the CPU backend, exact for this run's " << rep.launches
     << " launch(es); the Nsight Compute metric beside each (docs/profiling.md)\n";
  auto global = [&](const char* what, uint64_t req, uint64_t sectors, uint64_t bytes,
                    const char* metric) {
    os << "  " << what << grouped(req) << " requests, " << grouped(sectors) << " sectors ("
       << metric << "), " << grouped(bytes)
       << " bytes asked: " << pct(double(bytes), 32.0 * sectors) << " sector efficiency\n";
  };
  // The metric names as Nsight Compute 2025's `--query-metrics` lists them (the ldmatrix and
  // cp.async ones under sm__sass_, scripts/profile.py).
  auto shared = [&](const char* what, uint64_t inst, uint64_t wavefronts, uint64_t conflicts,
                    const char* prefix, const char* op) {
    os << "  " << what << grouped(inst) << " instructions, " << grouped(wavefronts)
       << " wavefronts (" << prefix << "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_" << op
       << ".sum), " << grouped(conflicts) << " bank conflicts (" << prefix
       << "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_" << op << ".sum)\n";
  };
  global("global loads     ", c.gld_requests, c.gld_sectors, c.gld_bytes,
         "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum");
  global("global stores    ", c.gst_requests, c.gst_sectors, c.gst_bytes,
         "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum");
  if (c.ldgsts_requests) {
    global("cp.async global  ", c.ldgsts_requests, c.ldgsts_sectors, c.ldgsts_bytes,
           "sm__sass_l1tex_t_sectors_pipe_lsu_mem_global_op_ldgsts.sum");
    os << "  cp.async shared  " << grouped(c.ldgsts_wavefronts) << " wavefronts, "
       << grouped(c.ldgsts_conflicts()) << " bank conflicts (16-byte writes, quarter warps)\n";
  }
  if (c.tma_copies)
    os << "  TMA loads        " << grouped(c.tma_copies) << " copies, " << grouped(c.tma_sectors)
       << " sectors, " << grouped(c.tma_bytes)
       << " bytes into shared memory (async proxy: no LSU wavefronts)\n";
  shared("shared loads     ", c.lds_inst, c.lds_wavefronts, c.lds_conflicts(), "", "ld");
  shared("shared stores    ", c.sts_inst, c.sts_wavefronts, c.sts_conflicts(), "", "st");
  if (c.ldsm_inst)
    shared("ldmatrix         ", c.ldsm_inst, c.ldsm_wavefronts, c.ldsm_conflicts(), "sm__sass_",
           "ldsm");
  const double flops = r.backward ? r.problem.backward_flops() : r.problem.flops();
  os << "  tensor cores     " << grouped(c.mma)
     << " mma.sync (sm__inst_executed_pipe_tensor_op_hmma.sum, less ptxas's HFMA2.MMA moves: "
        "sm__inst_executed_pipe_tensor_op_hmma_type_hfma2.sum), "
     << grouped(c.wgmma) << " wgmma: " << num(c.tensor_flops / 1e9, 4) << " GFLOP, "
     << pct(c.tensor_flops, flops) << " of the problem's " << num(flops / 1e9, 4) << " GFLOP";
  if (c.wgmma) os << "; " << grouped(c.wgmma_smem_bytes) << " shared bytes read as operands";
  os << "\n  synchronisation  " << grouped(c.block_barriers) << " block barriers, "
     << grouped(c.named_barriers) << " named barriers, " << grouped(c.mbarrier_ops)
     << " mbarrier operations, " << grouped(c.shuffles) << " shuffles, " << grouped(c.votes)
     << " votes (warp-level instructions)\n";
  uint64_t distinct = 0, moved = 0;
  std::string per;
  for (const auto& b : rep.buffers) {
    distinct += b.distinct, moved += b.moved;
    per += (per.empty() ? "" : ", ") + b.label + " " + mib(b.distinct);
  }
  os << "  DRAM lower bound " << mib(distinct) << " distinct bytes touched (" << per
     << "); sectors moved " << mib(moved) << " (dram__bytes_read.sum + dram__bytes_write.sum "
     << "lies between)\n";
  // The lines that matter most: bank conflicts, then global sectors.
  std::vector<const simt::counters::Line*> lines;
  for (const auto& l : rep.lines) lines.push_back(&l);
  std::stable_sort(lines.begin(), lines.end(), [](auto* a, auto* b) {
    return a->counts.shared_conflicts() > b->counts.shared_conflicts();
  });
  if (!lines.empty() && lines.front()->counts.shared_conflicts() > 0) {
    os << "  top lines by bank conflicts:\n";
    for (size_t i = 0; i < lines.size() && i < 5 && lines[i]->counts.shared_conflicts() > 0; ++i) {
      const auto& k = lines[i]->counts;
      os << "    " << lines[i]->where << ": " << grouped(k.shared_conflicts()) << " conflicts in "
         << grouped(k.lds_wavefronts + k.sts_wavefronts + k.ldsm_wavefronts + k.ldgsts_wavefronts)
         << " wavefronts\n";
    }
  }
  os << "  top lines by global sectors:\n";
  for (size_t i = 0; i < rep.lines.size() && i < 5 && rep.lines[i].counts.global_sectors() > 0;
       ++i) {
    const auto& k = rep.lines[i].counts;
    os << "    " << rep.lines[i].where << ": " << grouped(k.global_sectors()) << " sectors\n";
  }
  os << "speed-of-light MODEL (datasheet figures, common/sol_model.cpp; a lower bound, not a "
        "measurement):";
  for (const GpuSpec& g : model_gpus()) {
    const SolModel m = speed_of_light(g, r.problem, rep);
    os << "\n  " << g.name << ": " << num(m.us, 4) << " us model, bound by " << m.binding << " (";
    for (size_t i = 0; i < m.bounds.size(); ++i)
      os << (i ? ", " : "") << m.bounds[i].unit << " " << num(m.bounds[i].us, 3);
    os << " us)";
  }
  return os.str();
}

}  // namespace attn
