#include "engine/fault_injection.h"

#include <atomic>
#include <mutex>

namespace ts::engine {
namespace {
std::atomic<bool> g_installed{false};
std::mutex g_mu;
FaultHook& hook() {
  static FaultHook h;
  return h;
}
}  // namespace

void set_fault_hook(FaultHook h) {
  std::lock_guard lock(g_mu);
  hook() = std::move(h);
  g_installed.store(static_cast<bool>(hook()));
}

Fault injected_fault(const Request& request) {
  if (!g_installed.load(std::memory_order_relaxed)) return Fault::kNone;
  std::lock_guard lock(g_mu);
  return hook() ? hook()(request) : Fault::kNone;
}

}  // namespace ts::engine
