#include "common/cli.h"

#include <CLI/CLI.hpp>
#include <stdexcept>

#include "common/simt/launch.h"

namespace attn {

CliResult parse_cli(int argc, const char* const* argv, const std::string& program, Options& out) {
  CLI::App app{program +
                   ": attention O = softmax(scale * Q K^T + mask) V, checked against an "
                   "FP64 reference",
               program};
  Problem& p = out.problem;
  int seq = 0;
  std::string dtype = "fp16";
  float scale = 0;
  app.add_option("--backend", out.backend, "auto (GPU if present, else CPU) | gpu | cpu")
      ->check(CLI::IsMember({"auto", "gpu", "cpu"}));
  app.add_option("--batch", p.batch, "batch size")->capture_default_str();
  app.add_option("--heads", p.heads, "query heads")->capture_default_str();
  app.add_option("--heads-kv", p.heads_kv, "key/value heads (GQA; default: --heads)");
  app.add_option("--seqlen-q", p.seqlen_q, "query length")->capture_default_str();
  app.add_option("--seqlen-k", p.seqlen_k, "key length")->capture_default_str();
  app.add_option("--seq", seq, "query and key length (sets both)");
  app.add_option("--dim", p.dim, "head dimension")->capture_default_str();
  app.add_option("--dtype", dtype, "fp16 | bf16")->check(CLI::IsMember({"fp16", "bf16"}));
  app.add_flag("--causal", p.causal, "causal mask, bottom-right aligned when Sq != Sk");
  app.add_option("--seqlens-k", p.seqlens_k, "per-batch key lengths, comma separated")
      ->delimiter(',');
  app.add_option("--dropout", p.dropout, "dropout probability on P, in [0, 1)");
  app.add_option("--seed", p.seed, "seed of the inputs and of the dropout mask")
      ->capture_default_str();
  app.add_option("--scale", scale, "softmax scale (default 1/sqrt(dim))");
  app.add_option("--iters", out.iters, "timed iterations (the median is reported)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--warmup", out.warmup, "untimed iterations before timing")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app.add_option("--variant", out.variant,
                 "kernel variant, for a step that has several (step5: sm80 | sm90a; default: "
                 "what the device runs best)");
  app.add_option("--csv", out.csv, "append a result row to this CSV file");
  app.add_flag("!--no-check", out.check, "skip the FP64 reference check");
  app.add_option("--schedule", out.schedule,
                 "CPU backend: order fibers run in between sync points: forward | reverse | "
                 "random[:SEED]");
  app.add_flag("--quiet", out.quiet, "print only the result line");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return {0, app.help()};
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    return {2, program + ": " + what + " (see --help)"};
  }
  if (seq != 0 || app.count("--seq")) {
    if (app.count("--seqlen-q") || app.count("--seqlen-k"))
      return {2, program + ": --seq sets both lengths; do not combine it with --seqlen-q/-k"};
    p.seqlen_q = p.seqlen_k = seq;
  }
  p.dtype = *parse_dtype(dtype);
  if (app.count("--scale")) p.scale = scale;
  if (app.count("--heads-kv") && p.heads_kv < 1)
    return {2, program + ": --heads-kv " + std::to_string(p.heads_kv) + ": must be at least 1"};
  try {
    simt::parse_schedule(out.schedule);
  } catch (const std::invalid_argument& e) {
    return {2, program + ": --schedule: " + e.what()};
  }
  if (const std::string why = validate(p); !why.empty()) return {2, program + ": " + why};
  return {};
}

}  // namespace attn
