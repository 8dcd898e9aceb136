// Per-op wall-time accounting of Model::forward, for finding where a step goes (issue #10).
// Compiled out unless the build defines TS_FORWARD_PROFILE (-DCMAKE_CXX_FLAGS=-DTS_FORWARD_PROFILE):
// then every forward adds each op's wall time on the calling thread (which also runs its share
// of every parallel op, so an op's time includes its dispatch and the wait for the workers),
// and the process prints a table to stderr at exit. Not thread-safe: one forward at a time.
#pragma once

#include <chrono>
#include <cstdint>

namespace ts::model::prof {

enum Op : int {
  kEmbed, kNorm, kQkv, kRopeBias, kKvWrite, kAttention, kOProj, kFfnNorm, kGateUp, kDownPrep, kDown, kDownAdd, kLogits,
  kNumOps
};

#ifdef TS_FORWARD_PROFILE
void add(int64_t tokens, Op op, std::chrono::steady_clock::duration d);
void count_forward(int64_t tokens);
// One forward of `tokens` tokens: each call marks the end of the previous op and the start of the next.
class Lap {
 public:
  explicit Lap(int64_t tokens) : tokens_(tokens), t_(std::chrono::steady_clock::now()) { count_forward(tokens); }
  void operator()(Op op) {
    const auto now = std::chrono::steady_clock::now();
    add(tokens_, op, now - t_);
    t_ = now;
  }

 private:
  int64_t tokens_;
  std::chrono::steady_clock::time_point t_;
};
#else
class Lap {
 public:
  explicit Lap(int64_t) {}
  void operator()(Op) {}
};
#endif

}  // namespace ts::model::prof
