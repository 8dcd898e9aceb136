#include "model/forward_profile.h"

#ifdef TS_FORWARD_PROFILE
#include <cstdio>
#include <map>

namespace ts::model::prof {

namespace {
constexpr const char* kNames[kNumOps] = {"embed+rope tables", "attn norm", "qkv matmul", "bias/norm/rope",
                                         "kv write", "attention", "o_proj", "add+ffn norm", "gate/up+act",
                                         "down act prep", "down matmul", "down add+norm", "final norm+logits"};
struct PerBatch {
  double ns[kNumOps] = {};
  int64_t forwards = 0;
};
struct Table {
  std::map<int64_t, PerBatch> by_tokens;  // batch size (tokens) -> sums
  ~Table() {
    for (const auto& [tokens, b] : by_tokens) {
      if (b.forwards < 10 && tokens < 64) continue;  // prefill chunks: even one is worth a table
      double total = 0;
      for (double v : b.ns) total += v;
      const double f = static_cast<double>(b.forwards);
      std::fprintf(stderr, "forward profile, %lld-token forwards: %lld, %.3f ms each\n", static_cast<long long>(tokens),
                   static_cast<long long>(b.forwards), total / 1e6 / f);
      for (int i = 0; i < kNumOps; ++i) {
        std::fprintf(stderr, "  %-20s %8.1f us %5.1f %%\n", kNames[i], b.ns[i] / 1e3 / f, 100.0 * b.ns[i] / total);
      }
    }
  }
};
Table& table() {
  static Table t;
  return t;
}
}  // namespace

void add(int64_t tokens, Op op, std::chrono::steady_clock::duration d) {
  table().by_tokens[tokens].ns[op] += static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}
void count_forward(int64_t tokens) { ++table().by_tokens[tokens].forwards; }

}  // namespace ts::model::prof
#endif
