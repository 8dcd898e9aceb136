// Runtime of one compiled grammar: a byte-level pushdown automaton whose configurations
// (sets of stacks) are interned into states, so that stepping a state by a byte is memoized
// (a lazily built DFA over configurations), and allowed-token masks are computed by walking the
// vocabulary trie from a state and memoized per state.
//
// Stacks are hash-consed nodes (position in Grammar::elems, parent node); right recursion is
// tail-called (no stack growth for x*). Memo tables are bounded: when more than kMaxStates states
// or kMaxNodes nodes exist, everything is cleared and generation() changes; holders of state ids
// (ConstraintState) then rebuild their state by replaying their bytes.
//
// Not thread-safe by itself: callers hold mu() around every call (ConstraintState does).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "structured/grammar.h"

namespace ts::structured {

class Runtime {
 public:
  static constexpr int32_t kDead = -1;
  static constexpr size_t kMaxStates = 1 << 14;
  static constexpr size_t kMaxNodes = 1 << 20;
  static constexpr size_t kMaxTops = 4096;  // stack tops in one configuration

  // index: the vocabulary for mask()/trigger_mask(); may be null when only bytes are run.
  Runtime(const Grammar& g, const TokenIndex* index);

  std::mutex& mu() { return mu_; }
  uint64_t generation() const { return generation_; }
  int32_t initial() const { return initial_; }
  // Clears all memo tables when they are over their bounds; true when it did.
  bool maybe_reset();
  // State after one more byte, or kDead.
  int32_t step(int32_t state, uint8_t byte);
  // Runs bytes from `state`; kDead when any is refused.
  int32_t run(int32_t state, std::string_view bytes);
  // The bytes so far form a complete sentence.
  bool accepting(int32_t state) const { return states_[static_cast<size_t>(state)].accept; }
  // Some further byte could be accepted.
  bool has_continuation(int32_t state) const { return states_[static_cast<size_t>(state)].cont; }
  // Allowed-token mask (index().num_mask_words() words) for `state`, EOG bits included when
  // accepting. The pointer stays valid until the next call on this runtime.
  const uint64_t* mask(int32_t state);
  // Mask while waiting for the start_after trigger with `matched` bytes of it already seen:
  // every token except EOG and except those that complete the trigger and continue with bytes
  // the grammar refuses.
  const uint64_t* trigger_mask(std::string_view trigger, size_t matched);

  size_t num_states() const { return states_.size(); }

 private:
  struct NodeRec { uint32_t pos; int32_t parent; };
  struct State {
    std::vector<int32_t> nodes;           // sorted stack tops (-1 = the empty stack: accept)
    bool accept = false;
    bool cont = false;
    int32_t mask_slot = -1;               // index into masks_ or -1
    int32_t row = -1;                     // row of trans_ once stepped from (leaves get none)
  };
  static constexpr int32_t kUnknown = -2;
  struct VecHash {
    size_t operator()(const std::vector<int32_t>& v) const {
      uint64_t h = 1469598103934665603ull;
      for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
      return static_cast<size_t>(h);
    }
  };

  void reset();
  int32_t node(uint32_t pos, int32_t parent);
  void closure(uint32_t pos, int32_t parent, std::vector<int32_t>* out,
               std::vector<std::pair<uint32_t, int32_t>>* seen);
  int32_t intern(std::vector<int32_t> nodes);
  int32_t compute_step(int32_t state, uint8_t byte);

  const Grammar& g_;
  const TokenIndex* index_;
  std::mutex mu_;
  uint64_t generation_ = 0;
  size_t state_limit_ = kMaxStates;       // maybe_reset() thresholds
  size_t node_limit_ = kMaxNodes;
  int32_t initial_ = 0;
  std::vector<NodeRec> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<State> states_;
  std::vector<int32_t> trans_;            // [num_rows][256]: next state, kDead, or kUnknown
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> state_ids_;
  std::vector<uint64_t> masks_;           // [num_masks][words]
  int32_t num_masks_ = 0;
  std::vector<int32_t> walk_;             // trie walk: state per depth
  std::vector<std::vector<uint64_t>> trigger_masks_;  // [matched] -> mask (empty = not built)
  std::string trigger_;
};

}  // namespace ts::structured
