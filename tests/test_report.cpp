// CSV rows: header, escaping, appending, and refusing a file with another header.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/report.h"

namespace {
std::vector<std::string> lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}
std::string temp_path(const char* name) {
  auto p = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove(p);
  return p.string();
}
}  // namespace

TEST_CASE("CSV has the documented columns", "[report]") {
  const auto& cols = attn::csv_columns();
  for (const char* c : {"step", "backend", "device", "dtype", "batch", "heads", "heads_kv",
                        "seqlen_q", "seqlen_k", "dim", "causal", "dropout", "time_ms", "tflops",
                        "max_abs_err", "lse_max_err", "passed", "commit"})
    CHECK(std::find(cols.begin(), cols.end(), c) != cols.end());
  attn::ResultRow r;
  CHECK(attn::csv_fields(r).size() == cols.size());
}

TEST_CASE("CSV: the config column holds the tile configuration that ran", "[report]") {
  const auto& cols = attn::csv_columns();
  const auto at = std::find(cols.begin(), cols.end(), "config");
  REQUIRE(at != cols.end());
  attn::ResultRow r;
  r.config = "br64_bc64_w4_s2";
  CHECK(attn::csv_fields(r)[at - cols.begin()] == "br64_bc64_w4_s2");
  r.config.clear();  // steps without configurations leave it empty
  CHECK(attn::csv_fields(r)[at - cols.begin()].empty());
}

TEST_CASE("CSV: header once, then one row per run", "[report]") {
  const std::string path = temp_path("attn_test_rows.csv");
  attn::ResultRow r;
  r.step = "step0_reference";
  r.backend = "cpu";
  r.device = "Some CPU, with a comma";
  r.problem.seqlens_k = {3, 4, 0, 1};
  r.problem.batch = 4;
  r.checked = true;
  CHECK(attn::append_csv(path, r).empty());
  CHECK(attn::append_csv(path, r).empty());
  const auto l = lines(path);
  REQUIRE(l.size() == 3);
  CHECK(l[0].rfind("step,backend,device,", 0) == 0);
  CHECK_THAT(l[1], Catch::Contains("\"Some CPU, with a comma\""));
  CHECK_THAT(l[1], Catch::Contains(",3;4;0;1,"));
  CHECK(l[1] == l[2]);
}

TEST_CASE("CSV: a file with another header is refused", "[report]") {
  const std::string path = temp_path("attn_test_bad.csv");
  std::ofstream(path) << "a,b,c\n1,2,3\n";
  const std::string err = attn::append_csv(path, attn::ResultRow{});
  CHECK_THAT(err, Catch::Contains("different header"));
  CHECK(lines(path).size() == 2);
}

TEST_CASE("CSV escaping", "[report]") {
  CHECK(attn::csv_escape("plain") == "plain");
  CHECK(attn::csv_escape("a,b") == "\"a,b\"");
  CHECK(attn::csv_escape("say \"hi\"") == "\"say \"\"hi\"\"\"");
}
