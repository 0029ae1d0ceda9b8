#include "common/cli.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <sstream>
#include <stdexcept>

#include "common/simt/launch.h"
#include "common/sol_model.h"
#include "common/tensor_io.h"

namespace attn {

std::string parse_lengths(const std::string& text, std::vector<int>& out) {
  out.clear();
  size_t start = 0;
  for (int item = 1;; ++item) {
    const size_t comma = text.find(',', start);
    const std::string s = text.substr(start, comma == std::string::npos ? comma : comma - start);
    if (s.empty()) return "item " + std::to_string(item) + " is empty";
    int v = 0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || ptr != s.data() + s.size() || v < 0)
      return "'" + s + "' is not a length (a non-negative integer)";
    out.push_back(v);
    if (comma == std::string::npos) return "";
    start = comma + 1;
  }
}

namespace {

// Rejects a leading minus sign: CLI11 would otherwise wrap "-1" into a huge unsigned seed.
const CLI::Validator kNonNegative(
    [](std::string& s) {
      return s.find_first_not_of(" \t") != std::string::npos && s[s.find_first_not_of(" \t")] == '-'
                 ? std::string("must not be negative")
                 : std::string();
    },
    "NONNEGATIVE");

std::string lengths_str(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s.empty() ? "none" : s;
}

}  // namespace

CliResult parse_cli(int argc, const char* const* argv, const std::string& program, Options& out) {
  return parse_cli(argc, argv,
                   CliStep{program, true, {"sm80", "sm90a"}, true, {}, {"NAME: any step's rung"}},
                   out);
}

CliResult parse_cli(int argc, const char* const* argv, const CliStep& step, Options& out) {
  const std::string& program = step.name;
  auto join = [](const auto& items) {
    std::ostringstream os;
    for (size_t i = 0; i < items.size(); ++i) os << (i ? ", " : "") << items[i];
    return os.str();
  };
  CLI::App app{program +
                   ": attention O = softmax(scale * Q K^T + mask) V, checked against an "
                   "FP64 reference",
               program};
  Problem& p = out.problem;
  int seq = 0;
  std::string dtype = "fp16", seqlens_k, seqlens_q;
  float scale = 0;
  app.add_option("--backend", out.backend, "auto (GPU if present, else CPU) | gpu | cpu")
      ->check(CLI::IsMember({"auto", "gpu", "cpu"}));
  app.add_option("--batch", p.batch, "batch size")->capture_default_str();
  app.add_option("--heads", p.heads, "query heads")->capture_default_str();
  app.add_option("--heads-kv", p.heads_kv, "key/value heads (GQA; default: --heads)");
  app.add_option("--seqlen-q", p.seqlen_q, "query length")->capture_default_str();
  app.add_option("--seqlen-k", p.seqlen_k, "key length")->capture_default_str();
  app.add_option("--seq", seq, "query and key length (sets both)");
  app.add_option("--dim", p.dim,
                 "head dimension" +
                     (step.head_dims.empty()
                          ? std::string(" (any from 1 to ") + std::to_string(kMaxHeadDim) + ")"
                          : " (this step: " + join(step.head_dims) + ")"))
      ->capture_default_str();
  app.add_option("--dtype", dtype, "fp16 | bf16")->check(CLI::IsMember({"fp16", "bf16"}));
  app.add_flag("--causal", p.causal,
               "causal mask, bottom-right aligned per batch when query and key lengths differ");
  app.add_option("--seqlens-k", seqlens_k, "per-batch key lengths, comma separated");
  app.add_option("--seqlens-q", seqlens_q,
                 "per-batch query lengths, comma separated (rows past one: O = 0, LSE = -inf)");
  app.add_option("--dropout", p.dropout, "dropout probability on P, in [0, 1)");
  app.add_option("--seed", p.seed, "seed of the inputs and of the dropout mask")
      ->check(kNonNegative)
      ->capture_default_str();
  app.add_option("--scale", scale, "softmax scale (default 1/sqrt(dim))");
  app.add_option("--iters", out.iters,
                 "timed samples, the median is reported (default: 20 on a GPU, 1 on the CPU; 0: "
                 "the checked run alone, for a profiler)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--warmup", out.warmup,
                 "untimed samples before timing (default: 2 on a GPU, 0 on the CPU)")
      ->check(CLI::Range(0, 1000000));
  if (!step.variants.empty())
    app.add_option(
        "--variant", out.variant,
        "kernel variant: " + join(step.variants) + " (default: what the device runs best)");
  if (!step.rungs.empty()) {
    std::string ladder;
    for (size_t i = 0; i < step.rungs.size(); ++i)
      ladder += "\n  " + std::to_string(i + 1) + " " + step.rungs[i];
    app.add_option("--rung", out.rung,
                   "a rung of this step's ladder, by name or number (default: the last, the "
                   "step's own kernel):" +
                       ladder);
  }
  app.add_option("--csv", out.csv, "append a result row to this CSV file");
  app.add_option("--load", out.load,
                 "read q, k, v (and seqlens_q/seqlens_k) from this .safetensors file; the shape "
                 "comes from the tensors");
  app.add_option("--save", out.save,
                 "write q, k, v, o, lse (and the lengths) to this .safetensors file");
  app.add_flag("!--no-check", out.check, "skip the FP64 reference check");
  if (step.kernels)
    app.add_option("--schedule", out.schedule,
                   "CPU backend: order fibers run in between sync points: forward | reverse | "
                   "random[:SEED] | greedy");
  app.add_flag("--quiet", out.quiet, "print only the result line");
  if (step.configs) {
    app.add_option("--config", out.config,
                   "tile configuration by name (default: the tuned table's choice for this GPU "
                   "and problem)");
    app.add_option("--tuned-table", out.tuned_table,
                   "tuned-configuration table to read instead of the step's own");
  }
  if (step.kernels) {
    app.add_flag(
        "--counters", out.counters,
        "count what Nsight Compute would (global sectors, shared wavefronts and bank "
        "conflicts, tensor work, barriers; per source line) on the CPU backend, print them "
        "with a speed-of-light model, and add them to --csv");
    app.add_flag("--instrumented", out.instrumented,
                 "check every load, store and barrier of the kernels against the CPU backend's "
                 "rules (races, bounds, alignment, cp.async and mbarrier order) on the CPU "
                 "backend, as --counters does, without counting; with --iters 0 the time is the "
                 "instrumented run's");
    app.add_option("--model-gpu", out.model_gpu,
                   "the GPU of the --counters speed-of-light model (H100 SXM, A100 SXM 80GB, L4, "
                   "RTX 4090, RTX 5070)")
        ->capture_default_str();
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return {0, app.help()};
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    return {2, program + ": " + what + " (see --help)"};
  }
  auto refuse = [&](const std::string& why) { return CliResult{2, program + ": " + why}; };
  if (seq != 0 || app.count("--seq")) {
    if (app.count("--seqlen-q") || app.count("--seqlen-k"))
      return refuse("--seq sets both lengths; do not combine it with --seqlen-q/-k");
    p.seqlen_q = p.seqlen_k = seq;
  }
  p.dtype = *parse_dtype(dtype);
  if (app.count("--scale")) p.scale = scale;
  if (app.count("--heads-kv") && p.heads_kv < 1)
    return refuse("--heads-kv " + std::to_string(p.heads_kv) + ": must be at least 1");
  for (auto [flag, text, lens] : {std::tuple{"--seqlens-k", &seqlens_k, &p.seqlens_k},
                                  std::tuple{"--seqlens-q", &seqlens_q, &p.seqlens_q}})
    if (app.count(flag))
      if (const std::string why = parse_lengths(*text, *lens); !why.empty())
        return refuse(std::string(flag) + " " + *text + ": " + why);
  try {
    simt::parse_schedule(out.schedule);
  } catch (const std::invalid_argument& e) {
    return refuse(std::string("--schedule: ") + e.what());
  }
  if (step.kernels && app.count("--model-gpu") && !out.counters)
    return refuse("--model-gpu models a counted run: add --counters");
  if (!find_gpu(out.model_gpu)) {
    std::string known;
    for (const GpuSpec& g : model_gpus()) known += (known.empty() ? "" : ", ") + g.name;
    return refuse("--model-gpu " + out.model_gpu + ": not a GPU the model knows (" + known + ")");
  }
  if (out.instrumented && out.counters)
    return refuse("--counters checks every access already: drop --instrumented");
  if (out.instrumented && out.backend == "gpu")
    return refuse(
        "--instrumented checks on the CPU backend (--backend cpu); on a GPU, "
        "compute-sanitizer checks: scripts/gpu_run.sh runs it");
  if (out.instrumented && !out.csv.empty())
    return refuse(
        "--instrumented times the kernels with every access checked, which is not a "
        "result to compare: drop --csv");
  if (out.counters && out.backend == "gpu")
    return refuse(
        "--counters counts on the CPU backend (--backend cpu); on a GPU, Nsight Compute "
        "measures the same metrics: scripts/profile.py prints the command");

  // --load: the shape comes from the file's tensors; a flag may repeat it but not contradict it.
  if (!out.load.empty()) {
    Problem f = p;
    if (const std::string why = read_problem(out.load, f); !why.empty())
      return refuse("--load " + out.load + ": " + why);
    const std::string in_file = " but " + out.load + " has ";
    auto differs = [&](const char* flag, int given, int file, const char* what) {
      return app.count(flag) && given != file ? std::string(flag) + " " + std::to_string(given) +
                                                    in_file + what + " " + std::to_string(file)
                                              : std::string();
    };
    for (const std::string& why : {differs("--batch", p.batch, f.batch, "batch"),
                                   differs("--heads", p.heads, f.heads, "heads"),
                                   differs("--heads-kv", p.kv_heads(), f.kv_heads(), "heads_kv"),
                                   differs("--seqlen-q", p.seqlen_q, f.seqlen_q, "seqlen_q"),
                                   differs("--seqlen-k", p.seqlen_k, f.seqlen_k, "seqlen_k"),
                                   differs("--seq", p.seqlen_q, f.seqlen_q, "seqlen_q"),
                                   differs("--seq", p.seqlen_k, f.seqlen_k, "seqlen_k"),
                                   differs("--dim", p.dim, f.dim, "dim")})
      if (!why.empty()) return refuse(why + " (the shape comes from the file; drop the flag)");
    if (app.count("--dtype") && p.dtype != f.dtype)
      return refuse("--dtype " + dtype + in_file + dtype_name(f.dtype) +
                    " tensors (the dtype comes from the file; drop the flag)");
    // The mask, scale, dropout and seed the file records (--save writes them) win too; a flag may
    // repeat them but not contradict them.
    auto text = [](double x) {
      std::ostringstream os;
      os << x;
      return os.str();
    };
    if (app.count("--causal") && p.causal != f.causal)
      return refuse("--causal" + in_file +
                    "a problem without the causal mask (it comes from the "
                    "file; drop the flag)");
    if (app.count("--dropout") && p.dropout != f.dropout)
      return refuse("--dropout " + text(p.dropout) + in_file + "dropout " + text(f.dropout) +
                    " (drop the flag)");
    if (app.count("--scale") && p.softmax_scale() != f.softmax_scale())
      return refuse("--scale " + text(p.softmax_scale()) + in_file + "scale " +
                    text(f.softmax_scale()) + " (drop the flag)");
    if (app.count("--seed") && p.seed != f.seed)
      return refuse("--seed " + std::to_string(p.seed) + in_file + "seed " +
                    std::to_string(f.seed) + " (drop the flag)");
    for (auto [flag, given, file] : {std::tuple{"--seqlens-k", &p.seqlens_k, &f.seqlens_k},
                                     std::tuple{"--seqlens-q", &p.seqlens_q, &f.seqlens_q}}) {
      if (file->empty()) {
        *file = *given;  // the file has none: the flag supplies them
      } else if (app.count(flag) && *given != *file) {
        return refuse(std::string(flag) + " " + lengths_str(*given) + in_file + lengths_str(*file) +
                      " (drop the flag)");
      }
    }
    p = f;
  }
  if (std::string why = validate(p); !why.empty()) {
    // The lengths came from --seq: name the flag the user gave.
    if (app.count("--seq") &&
        (why.rfind("--seqlen-q ", 0) == 0 || why.rfind("--seqlen-k ", 0) == 0))
      why = "--seq" + why.substr(10);
    return refuse(why);
  }

  // Output files are checked now, so that a bad path fails before any work.
  for (auto [flag, path] : {std::pair{"--csv", &out.csv}, std::pair{"--save", &out.save}})
    if (!path->empty())
      if (const std::string why = check_output_path(*path); !why.empty())
        return refuse(std::string(flag) + " " + *path + ": " + why);
  if (!out.load.empty() && out.load == out.save)
    return refuse("--save " + out.save + ": would overwrite the --load file while reading it");
  return {};
}

}  // namespace attn
