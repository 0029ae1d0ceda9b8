// The kernels of the course, as attn_suite runs them (suite.h).
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/backend.h"
#include "common/steps.h"
#include "suite/suite.h"

#if ATTN_HAVE_GPU
#include "baselines/cublas_unfused.h"
#endif

namespace suite {

const std::vector<attn::StepInfo>& all_steps() {
  static const std::vector<attn::StepInfo> steps = [] {
    std::vector<attn::StepInfo> s = {attn::step0_info()};
    for (attn::StepInfo& k : attn::kernel_steps()) s.push_back(std::move(k));
    for (attn::StepInfo& k : attn::backward_steps()) s.push_back(std::move(k));
#if ATTN_HAVE_GPU
    s.push_back(baseline_cublas::info());
#endif
    return s;
  }();
  return steps;
}

std::string backend_unavailable(const std::string& backend) {
  if (backend != "gpu") return "";
  std::string why;
  try {
    if (!attn::make_gpu_backend(why)) return "--backend gpu: " + why;
  } catch (const std::exception& e) {  // a sticky CUDA error: the context is lost
    return "--backend gpu: " + std::string(e.what());
  }
  return "";
}

struct Watchdog::State {
  double seconds;
  std::mutex mutex;
  std::condition_variable wake;
  std::string what;  // empty: disarmed
  std::chrono::steady_clock::time_point since;
  bool done = false;
  std::thread thread;
};

Watchdog::Watchdog(double seconds) : state_(std::make_unique<State>()) {
  state_->seconds = seconds;
  if (seconds <= 0) return;
  state_->thread = std::thread([s = state_.get()] {
    std::unique_lock lock(s->mutex);
    while (!s->done) {
      s->wake.wait_for(lock, std::chrono::milliseconds(200));
      const double ran =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - s->since).count();
      if (s->what.empty() || ran < s->seconds) continue;
      std::printf("attn_suite: %s has not returned after %.0f s: a hang\n", s->what.c_str(), ran);
      std::fflush(stdout);
      std::_Exit(4);
    }
  });
}

Watchdog::~Watchdog() {
  if (!state_->thread.joinable()) return;
  {
    std::lock_guard lock(state_->mutex);
    state_->done = true;
  }
  state_->wake.notify_one();
  state_->thread.join();
}

void Watchdog::arm(const std::string& what) {
  std::lock_guard lock(state_->mutex);
  state_->what = what;
  state_->since = std::chrono::steady_clock::now();
}

void Watchdog::disarm() {
  std::lock_guard lock(state_->mutex);
  state_->what.clear();
}

attn::Options Kernel::options(const attn::Options& base) const {
  attn::Options o = base;
  o.rung = rung;
  o.variant = variant;
  o.config = config;
  return o;
}

std::string Kernel::flags() const {
  std::string f;
  if (!rung.empty()) f += " --rung " + rung;
  if (!variant.empty()) f += " --variant " + variant;
  if (!config.empty()) f += " --config " + config;
  return f.empty() ? f : f.substr(1);
}

namespace {

bool is_kernel_step(const attn::StepInfo& s) {
  return s.cpu != nullptr && s.gpu != nullptr;
}

void add_steps(std::vector<Kernel>& out) {
  for (const attn::StepInfo& s : all_steps()) {
    if (!is_kernel_step(s)) continue;
    if (s.variants.empty()) out.push_back({s.name, &s, "", "", "", "steps"});
    for (const std::string& v : s.variants)
      out.push_back({s.name + "[" + v + "]", &s, "", v, "", "steps"});
  }
}

// Every rung but the step's own kernels: the last (a variant of it, for step 5) and, in step 6,
// the sm80 variant's, which the ladder passes on its way to the sm90a one.
void add_rungs(std::vector<Kernel>& out) {
  for (const attn::StepInfo& s : all_steps())
    for (size_t i = 0; i + 1 < s.rungs.size(); ++i)
      if (s.rungs[i].cpu != s.cpu)  // not a variant's own kernel, which "steps" runs
        out.push_back({s.name + "[" + s.rungs[i].name + "]", &s, s.rungs[i].name, "", "", "rungs"});
}

// The tile configurations beside each step's default (its first), which "steps" runs.
void add_configs(std::vector<Kernel>& out) {
  for (const attn::StepInfo& s : all_steps())
    for (size_t i = 1; i < s.configs.size(); ++i)
      out.push_back({s.name + " " + s.configs[i].name, &s, "", "", s.configs[i].name, "configs"});
}

void add_baseline(std::vector<Kernel>& out) {
  for (const attn::StepInfo& s : all_steps())
    if (s.cpu == nullptr && s.gpu != nullptr) out.push_back({s.name, &s, "", "", "", "baseline"});
}

}  // namespace

std::vector<Kernel> kernels(const std::string& sets) {
  const std::vector<std::string> order = {"steps", "rungs", "configs", "baseline"};
  std::vector<std::string> wanted;
  std::stringstream ss(sets);
  for (std::string name; std::getline(ss, name, ',');) {
    if (name == "all") {
      wanted = order;
      continue;
    }
    bool known = false;
    for (const std::string& o : order) known = known || o == name;
    if (!known)
      throw std::invalid_argument("unknown kernel set '" + name +
                                  "' (steps, rungs, configs, baseline or all)");
    wanted.push_back(name);
  }
  std::vector<Kernel> out;
  auto want = [&](const std::string& name) {
    for (const std::string& w : wanted)
      if (w == name) return true;
    return false;
  };
  if (want("steps")) add_steps(out);
  if (want("rungs")) add_rungs(out);
  if (want("configs")) add_configs(out);
  if (want("baseline")) add_baseline(out);
  return out;
}

}  // namespace suite
