// Sequence: the scheduling state of one choice of one request (tokens, progress, KV block
// table). Output state (sampler RNG, text decoding, stop strings) lives with the engine, not
// here. Owned by the engine; the scheduler and KvCacheManager hold plain pointers.
// Not thread-safe: engine thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"

namespace ts::engine {

enum class SeqStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  int64_t id = 0;                    // engine-unique id
  int64_t request_order = 0;         // arrival order of its request (FCFS within a tier)
  Tier tier = Tier::kInteractive;    // serving tier
  int32_t priority = 0;              // the tier's priority (higher runs first, preempted last)
  std::string cache_namespace;       // prefix-cache namespace (tenant)
  std::vector<int32_t> tokens;       // prompt followed by generated tokens (and, during one
                                     // step, num_draft_tokens speculative tokens at the end)
  int32_t num_draft_tokens = 0;      // unverified drafted tokens at the end of tokens (engine only)
  int32_t num_prompt_tokens = 0;     // prompt length
  int32_t num_computed_tokens = 0;   // leading tokens whose KV is in block_table
  std::vector<int32_t> block_table;  // KV blocks covering [0, num_computed_tokens + scheduled)
                                     // (KV group 0: the only group of most models)
  std::vector<std::vector<int32_t>> more_block_tables;  // groups 1.. of a window-only KV cache
                                     // (model::KvLayout), same length as block_table; a
                                     // sliding-window group's released blocks are kNoBlock (-1)
  std::vector<uint64_t> block_hashes;  // chained hashes of leading full blocks (memo)
  int32_t num_registered_blocks = 0; // leading blocks already offered to the prefix cache
  int32_t num_cached_tokens = 0;     // tokens found in the prefix cache at the last admission
  int64_t admit_order = 0;           // grows with every (re)admission; newest is preempted first
  SeqStatus status = SeqStatus::kWaiting;
  TimePoint arrival;                 // request arrival (latency targets)
  int32_t num_preemptions = 0;       // times preempted
  int32_t num_admissions = 0;        // times admitted (1 + resumes after preemption)
  int64_t last_scheduled_step = -1;  // scheduler step that last gave it tokens

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
};

}  // namespace ts::engine
