// Fault injection into the engine's per-request processing, for tests only: a hook that the
// engine asks, for each sequence it is about to sample, whether to simulate a fault. It proves
// that a fault in one request ends that request (FinishReason::kError with a kInternal Status,
// which the server answers as 500 and records in the ledger) while the engine keeps serving.
//
// Nothing installs a hook outside tests; without one the engine pays one relaxed atomic load
// per sampled sequence. Thread-safe.
#pragma once

#include <functional>

#include "engine/request.h"

namespace ts::engine {

enum class Fault {
  kNone,
  kAllocFailure,    // std::bad_alloc while processing the request's step
  kTokenizerError,  // an exception from detokenization
  kNanLogits,       // the request's logits row contains NaN
};

using FaultHook = std::function<Fault(const Request&)>;

// Installs (or, with an empty function, removes) the hook. Tests only.
void set_fault_hook(FaultHook hook);
// The fault to simulate for `request` (kNone without a hook).
Fault injected_fault(const Request& request);

}  // namespace ts::engine
