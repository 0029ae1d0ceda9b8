// Inputs at the edges: bad seeds, list items and output paths, a blown-up softmax, memory that is
// not there, and tensors in and out through safetensors files (--save / --load), bad files too.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/cli.h"
#include "common/harness.h"
#include "common/memory.h"
#include "common/safetensors.h"

namespace step0 {
void streaming_attention(const attn::AttentionParams& p, attn::RunContext& ctx);
}

namespace {

struct Run {
  int code;
  std::string out;  // stdout and stderr together
};

std::string tmp(const std::string& name) {
  return "/tmp/attn_robust_" + std::to_string(::getpid()) + "_" + name;
}

Run run(const std::string& args) {
  const std::string log = tmp("log");
  const std::string cmd =
      std::string(ATTN_BIN_DIR) + "/step0_reference " + args + " >" + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(log.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A safetensors file from a JSON header and a data section, as a hostile writer would make it.
std::string make_file(const nlohmann::json& header, size_t data_bytes, uint64_t claimed_n = 0) {
  const std::string text = header.dump();
  const uint64_t n = claimed_n ? claimed_n : text.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + text + std::string(data_bytes, '\0');
}

nlohmann::json tensor(const char* dtype, std::vector<int64_t> shape, uint64_t begin, uint64_t end) {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
}

// q [1,2,3,4], k and v [1,2,5,4], F16: 48, 80 and 80 bytes.
nlohmann::json good_header() {
  return {{"q", tensor("F16", {1, 2, 3, 4}, 0, 48)},
          {"k", tensor("F16", {1, 2, 5, 4}, 48, 128)},
          {"v", tensor("F16", {1, 2, 5, 4}, 128, 208)}};
}

}  // namespace

TEST_CASE("robust: bad seeds, list items, lengths and scales exit 2 with one line", "[robust]") {
  for (const char* args :
       {"--seed -1", "--seed ' -5'", "--seqlens-k 1,,2 --batch 3", "--seqlens-k 1,2, --batch 3",
        "--seqlens-q ,1 --batch 2", "--seqlens-q 5,6", "--seqlens-q 300 --seq 256",
        "--seqlens-q -1", "--scale 1e38", "--scale -1e37", "--save /nonexistent/dir/x.st"}) {
    INFO(args);
    const Run r = run(args);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(lines(r.out) == 1);
    CHECK_THAT(r.out, Catch::StartsWith("step0_reference: "));
  }
  CHECK_THAT(run("--scale 1e38").out, Catch::Contains("FP32"));
  CHECK_THAT(run("--seqlens-k 1,,2 --batch 3").out, Catch::Contains("item 2 is empty"));
}

TEST_CASE("robust: a bad --csv path fails before any work", "[robust]") {
  const auto t0 = std::chrono::steady_clock::now();
  // Without the early check this problem would run (seconds) before the CSV write fails.
  const Run r = run("--seq 3000 --heads 8 --csv /nonexistent/dir/x.csv");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(lines(r.out) == 1);
  CHECK_THAT(r.out, Catch::Contains("/nonexistent/dir does not exist"));
  CHECK(s < 1.0);
}

namespace {
// O = NaN everywhere, LSE = +inf: what an overflowing softmax gives.
void nan_step(const attn::AttentionParams& p, attn::RunContext&) {
  const int64_t n = int64_t(p.batch) * p.heads * p.seqlen_q;
  auto* o = static_cast<attn::Bits16*>(p.o);
  for (int64_t x = 0; x < n * p.dim; ++x) o[x] = 0x7E00;  // fp16 NaN
  for (int64_t x = 0; x < n; ++x) p.lse[x] = INFINITY;
}
}  // namespace

TEST_CASE("robust: NaN and Inf outputs are reported as such, with a count and the first",
          "[robust]") {
  attn::Options o;
  o.problem.seqlen_q = o.problem.seqlen_k = 8;
  o.problem.heads = 2;
  const attn::RunOutcome r = attn::run_step({.name = "nan_step", .cpu = &nan_step}, o);
  CHECK(r.exit_code == 1);
  CHECK(r.row.check.nonfinite_o == 2 * 8 * 64);
  CHECK(r.row.check.nonfinite_lse == 2 * 8);
  CHECK_THAT(
      r.row.check.first_failure,
      Catch::Contains("1024 O and 16 LSE elements are NaN or Inf (first: O[b=0,h=0,i=0,d=0]"));
  CHECK_THAT(attn::format_result(r.row), Catch::Contains("NaN or Inf"));
}

TEST_CASE("robust: the CPU backend runs once by default, and flags override", "[robust]") {
  attn::Options o;
  o.problem.seqlen_q = o.problem.seqlen_k = 8;
  const attn::StepInfo step{.name = "step0_reference", .cpu = &step0::streaming_attention};
  CHECK(attn::run_step(step, o).row.iters == 1);
  o.iters = 3;
  CHECK(attn::run_step(step, o).row.iters == 3);
}

TEST_CASE("robust: notes come before the run, a long check among them", "[robust]") {
  attn::Options o;
  o.problem.heads = 16;
  o.problem.seqlen_q = o.problem.seqlen_k = 4096;  // 7e10 FLOP in the reference
  o.problem.dim = 128;
  std::vector<std::string> notes;
  // Stop at the first note: the run must not have started (it would take minutes).
  o.notice = [&](const std::string& line) {
    notes.push_back(line);
    throw std::runtime_error("stopped");
  };
  const attn::RunOutcome r =
      attn::run_step({.name = "step0_reference", .cpu = &step0::streaming_attention}, o);
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("--no-check skips it"));
  CHECK_FALSE(r.ran);
}

TEST_CASE("robust: memory that is not there is refused with the buffer, size and what fits",
          "[robust]") {
  std::vector<double> v;
  try {
    attn::host_resize(v, size_t(1) << 50, "the test buffer");  // 8 PiB
    FAIL("no OutOfMemory");
  } catch (const attn::OutOfMemory& e) {
    CHECK_THAT(e.what(), Catch::Contains("the test buffer needs 8192.0 TiB but"));
    CHECK_THAT(e.what(), Catch::Contains("is available"));
  }
  CHECK(attn::host_memory_available() > 0);
}

TEST_CASE("robust: --save then --load round-trips on step0, bit for bit", "[robust][tensors]") {
  const std::string a = tmp("a.safetensors"), b = tmp("b.safetensors");
  const Run r1 =
      run("--batch 2 --heads 4 --heads-kv 2 --seqlen-q 33 --seqlen-k 70 --dim 80 "
          "--dtype bf16 --causal --seqlens-q 33,5 --seqlens-k 0,70 --save " +
          a);
  INFO(r1.out);
  REQUIRE(r1.code == 0);
  const attn::safetensors::Header h = attn::safetensors::read_header(a);
  CHECK(h.tensors.at("q").shape == std::vector<int64_t>{2, 4, 33, 80});
  CHECK(h.tensors.at("k").shape == std::vector<int64_t>{2, 2, 70, 80});
  CHECK(h.tensors.at("q").dtype == "BF16");
  CHECK(h.tensors.at("lse").dtype == "F32");
  CHECK(h.tensors.at("seqlens_q").dtype == "I32");
  CHECK(h.metadata.at("causal") == "1");
  CHECK_THAT(h.metadata.at("problem"), Catch::Contains("seqlens_q=33,5"));

  // The shape comes from the file; only --causal is repeated. Flags that agree are fine.
  const Run r2 = run("--load " + a + " --causal --heads 4 --dtype bf16 --save " + b);
  INFO(r2.out);
  REQUIRE(r2.code == 0);
  CHECK_THAT(r2.out,
             Catch::Contains("B=2 H=4/2 Sq=33 Sk=70 D=80 causal seqlens_k=0,70 seqlens_q=33,5"));
  const attn::safetensors::Header h2 = attn::safetensors::read_header(b);
  for (const char* name : {"q", "k", "v", "o", "lse"}) {
    INFO(name);
    const auto& t1 = h.tensors.at(name);
    const auto& t2 = h2.tensors.at(name);
    REQUIRE(t1.end - t1.begin == t2.end - t2.begin);
    std::string x(t1.end - t1.begin, '\0'), y(x.size(), '\0');
    attn::safetensors::read_tensor(a, t1, x.data());
    attn::safetensors::read_tensor(b, t2, y.data());
    CHECK(x == y);
  }

  // The mask comes from the file too: loaded without --causal, the problem is still causal (it
  // used to be read as a non-causal one, and pass against a non-causal reference).
  const Run r3 = run("--load " + a);
  INFO(r3.out);
  REQUIRE(r3.code == 0);
  CHECK_THAT(r3.out, Catch::Contains("D=80 causal"));

  // Contradicting flags are refused.
  for (const std::string bad :
       {"--heads 8", "--dim 64", "--seq 70", "--dtype fp16", "--seqlens-k 1,2", "--batch 3",
        "--dropout 0.1", "--scale 0.5", "--seed 7"}) {
    INFO(bad);
    const Run r = run("--load " + a + " " + bad);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(lines(r.out) == 1);
  }
  CHECK(run("--load " + a + " --save " + a).code == 2);
  std::remove(a.c_str());
  std::remove(b.c_str());
}

TEST_CASE("robust: bad safetensors files exit 2 with one line", "[robust][tensors]") {
  const std::string f = tmp("bad.safetensors");
  auto expect = [&](const std::string& bytes, const std::string& says) {
    write_bytes(f, bytes);
    const Run r = run("--load " + f);
    INFO(says << "\n" << r.out);
    CHECK(r.code == 2);
    CHECK(lines(r.out) == 1);
    CHECK_THAT(r.out, Catch::Contains(says));
  };
  const std::string good = make_file(good_header(), 208);
  write_bytes(f, good);
  CHECK(run("--load " + f + " --iters 1").code == 0);  // the control: the file itself is fine

  expect(good.substr(0, 5), "too short for the 8-byte header length");
  expect(good.substr(0, 40), "truncated");
  expect(good.substr(0, good.size() - 1), "past the 207 data bytes");
  expect(make_file(good_header(), 208, uint64_t(1) << 40), "over the format's limit");
  expect(std::string("\x05\0\0\0\0\0\0\0{oops", 13), "not valid JSON");
  auto h = good_header();
  h["q"] = tensor("F32", {1, 2, 3, 4}, 0, 96);
  h["k"] = tensor("F32", {1, 2, 5, 4}, 96, 256);
  h["v"] = tensor("F32", {1, 2, 5, 4}, 256, 416);
  expect(make_file(h, 416), "q, k, v must be F16 or BF16");
  h = good_header();
  h["q"]["dtype"] = "BF16";
  expect(make_file(h, 208), "must share one dtype");
  h = good_header();
  h["q"]["dtype"] = "F8_E9M9";
  expect(make_file(h, 208), "unknown dtype");
  h = good_header();
  h["q"]["shape"] = {2, 3, 4};
  h["q"]["data_offsets"] = {0, 48};
  expect(make_file(h, 208), "expected rank 4");
  h = good_header();
  h["v"]["shape"] = {1, 2, 4, 5};
  expect(make_file(h, 208), "must have the same shape");
  h = good_header();
  h["k"]["shape"] = {1, 2, 5, 8};
  h["k"]["data_offsets"] = {48, 208};
  h["v"]["data_offsets"] = {208, 368};
  h["v"]["shape"] = {1, 2, 5, 8};
  expect(make_file(h, 368), "must agree on batch");
  h = good_header();
  h["k"]["data_offsets"] = {40, 120};
  expect(make_file(h, 208), "overlap");
  h = good_header();
  h["v"]["data_offsets"] = {128, 200};
  expect(make_file(h, 208), "but the shape needs 80");
  h = good_header();
  h.erase("v");
  expect(make_file(h, 208), "no tensor 'v'");
  h = good_header();
  h["seqlens_k"] = tensor("I64", {1}, 208, 216);
  expect(make_file(h, 216), "expected I32 [1]");
  expect("", "too short");
  CHECK_THAT(run("--load /nonexistent/x.safetensors").out, Catch::Contains("cannot open"));
  std::remove(f.c_str());
}

namespace {
// Writes nothing: what the check's poison is there to catch.
void silent_step(const attn::AttentionParams&, attn::RunContext&) {}
}  // namespace

TEST_CASE("robust: the caller's arrays in place (the path CUDA arrays take), on the CPU backend",
          "[robust][in_place]") {
  attn::Options o;
  attn::Problem& p = o.problem;
  p.batch = 2, p.heads = 2, p.heads_kv = 1, p.seqlen_q = 9, p.seqlen_k = 13, p.dim = 16;
  p.causal = true, p.seqlens_k = {13, 4}, p.dropout = 0.2f;
  const attn::StepInfo step{.name = "step0_reference", .cpu = &step0::streaming_attention};
  // The same problem the usual way: the harness's copies, outputs kept.
  const attn::HostInputs in = attn::make_inputs(p);
  o.inputs = &in;
  o.keep_outputs = true;
  o.backend = "cpu";
  const attn::RunOutcome copied = attn::run_step(step, o);
  REQUIRE(copied.exit_code == 0);
  // In place: O and LSE written where they are, bit for bit the same.
  std::vector<attn::Bits16> out(p.q_elements(), 0x1234);
  std::vector<float> lse(p.lse_elements(), 42.0f);
  const attn::Options::DeviceArrays arrays{in.q.data(), in.k.data(), in.v.data(), out.data(),
                                           lse.data()};
  o.inputs = nullptr;
  o.keep_outputs = false;
  o.device_arrays = &arrays;
  o.iters = 0, o.warmup = 0;
  for (const bool check : {false, true}) {
    o.check = check;
    std::fill(out.begin(), out.end(), attn::Bits16(0x1234));
    const attn::RunOutcome r = attn::run_step(step, o);
    INFO("check " << check << ": " << r.message);
    REQUIRE(r.exit_code == 0);
    CHECK(r.row.checked == check);
    CHECK(r.o.empty());  // nothing copied back
    CHECK(out == copied.o);
    CHECK(std::memcmp(lse.data(), copied.lse.data(), lse.size() * sizeof(float)) == 0);
  }
  // Unchecked, the outputs are the caller's: not poisoned, so a step that writes nothing leaves
  // them as they were; checked, they are poisoned first and the check finds them unwritten.
  const attn::StepInfo silent{.name = "silent_step", .cpu = &silent_step};
  std::fill(out.begin(), out.end(), attn::Bits16(0x1234));
  o.check = false;
  CHECK(attn::run_step(silent, o).exit_code == 0);
  CHECK(std::all_of(out.begin(), out.end(), [](attn::Bits16 x) { return x == 0x1234; }));
  o.check = true;
  const attn::RunOutcome r = attn::run_step(silent, o);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.row.check.first_failure, Catch::Contains("never written"));
  // What it cannot do is a programming error, not a user's: a stream on the CPU backend.
  const attn::Options::DeviceArrays streamed{in.q.data(), in.k.data(), in.v.data(),
                                             out.data(),  lse.data(),  &o};
  o.device_arrays = &streamed;
  CHECK_THROWS_AS(attn::run_step(step, o), std::logic_error);
}
