#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tensor/matrix.h"

namespace ts::tensor {

// Q5_0's summation order (matrix.h Q50Order).

Result<Q50Order> parse_q5_0_order(std::string_view name) {
  if (name == "ggml") return Q50Order::kGgml;
  if (name == "block") return Q50Order::kBlock;
  return invalid_argument("unknown Q5_0 order '" + std::string(name) + "' (expected ggml or block)");
}

namespace {

std::atomic<int>& q5_0_order_slot() {
  static std::atomic<int> slot{[] {
    const char* env = std::getenv("TOKENSERVE_Q5_0_ORDER");
    if (env == nullptr || *env == '\0') return static_cast<int>(Q50Order::kGgml);
    auto m = parse_q5_0_order(env);
    if (!m.ok()) {
      std::fprintf(stderr, "warning: TOKENSERVE_Q5_0_ORDER: %s; using ggml\n", m.status().message().c_str());
      return static_cast<int>(Q50Order::kGgml);
    }
    return static_cast<int>(*m);
  }()};
  return slot;
}

}  // namespace

void set_q5_0_order(Q50Order order) { q5_0_order_slot().store(static_cast<int>(order), std::memory_order_relaxed); }
Q50Order q5_0_order() { return static_cast<Q50Order>(q5_0_order_slot().load(std::memory_order_relaxed)); }

}  // namespace ts::tensor
