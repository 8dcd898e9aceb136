#include "structured/matcher.h"

#include <algorithm>
#include <cstring>

namespace ts::structured {

namespace {
constexpr size_t kMaxMaskBytes = size_t{8} << 20;  // memoized masks per constraint (~420 at 152k tokens)
}

Runtime::Runtime(const Grammar& g, const TokenIndex* index) : g_(g), index_(index) { reset(); }

void Runtime::reset() {
  ++generation_;
  nodes_.clear();
  node_ids_.clear();
  states_.clear();
  trans_.clear();
  state_ids_.clear();
  masks_.clear();
  num_masks_ = 0;
  std::vector<int32_t> init;
  std::vector<std::pair<uint32_t, int32_t>> seen;
  for (uint32_t a : g_.alts[g_.root]) closure(a, -1, &init, &seen);
  initial_ = intern(std::move(init));
}

int32_t Runtime::node(uint32_t pos, int32_t parent) {
  const uint64_t key = (uint64_t{pos} << 32) | static_cast<uint32_t>(parent + 1);
  auto it = node_ids_.find(key);
  if (it != node_ids_.end()) return it->second;
  nodes_.push_back({pos, parent});
  const int32_t id = static_cast<int32_t>(nodes_.size() - 1);
  node_ids_.emplace(key, id);
  return id;
}

// Expands the configuration "continue at pos, then return to parent" into stack tops.
void Runtime::closure(uint32_t pos, int32_t parent, std::vector<int32_t>* out,
                      std::vector<std::pair<uint32_t, int32_t>>* seen) {
  for (;;) {
    const std::pair<uint32_t, int32_t> key{pos, parent};
    if (std::find(seen->begin(), seen->end(), key) != seen->end()) return;
    seen->push_back(key);
    const Elem& e = g_.elems[pos];
    if (e.kind == ElemKind::kBytes) {
      out->push_back(node(pos, parent));
      return;
    }
    if (e.kind == ElemKind::kEnd) {
      if (parent < 0) {
        out->push_back(-1);
        return;
      }
      const NodeRec n = nodes_[static_cast<size_t>(parent)];
      pos = n.pos;
      parent = n.parent;
      continue;
    }
    // A rule: its alternatives, returning to pos + 1 (or straight to parent: tail call).
    const int32_t ret = g_.elems[pos + 1].kind == ElemKind::kEnd ? parent : node(pos + 1, parent);
    for (uint32_t a : g_.alts[e.arg]) closure(a, ret, out, seen);
    return;
  }
}

int32_t Runtime::intern(std::vector<int32_t> nodes) {
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  if (nodes.empty()) return kDead;
  auto it = state_ids_.find(nodes);
  if (it != state_ids_.end()) return it->second;
  State s;
  s.accept = nodes.front() == -1;
  s.cont = nodes.back() >= 0;
  s.nodes = nodes;
  states_.push_back(std::move(s));
  const int32_t id = static_cast<int32_t>(states_.size() - 1);
  state_ids_.emplace(std::move(nodes), id);
  return id;
}

int32_t Runtime::compute_step(int32_t state, uint8_t byte) {
  std::vector<int32_t> next;
  std::vector<std::pair<uint32_t, int32_t>> seen;
  // Copy: closure() may grow nodes_ and states_ is not touched, but keep it simple and safe.
  const std::vector<int32_t> tops = states_[static_cast<size_t>(state)].nodes;
  for (int32_t n : tops) {
    if (n < 0) continue;
    const NodeRec rec = nodes_[static_cast<size_t>(n)];
    if (!byteset_has(g_.sets[g_.elems[rec.pos].arg], byte)) continue;
    seen.clear();
    closure(rec.pos + 1, rec.parent, &next, &seen);
  }
  // Safety valve for highly ambiguous grammars (e.g. x ::= "a" x "b" | "a" x "c" keeps 2^n
  // stacks alive): a configuration above kMaxTops stack tops is refused like a dead end.
  if (next.size() > kMaxTops) return kDead;
  return intern(std::move(next));
}

int32_t Runtime::step(int32_t state, uint8_t byte) {
  int32_t row = states_[static_cast<size_t>(state)].row;
  if (row < 0) {
    row = static_cast<int32_t>(trans_.size() / 256);
    trans_.resize(trans_.size() + 256, kUnknown);
    states_[static_cast<size_t>(state)].row = row;
  }
  const size_t at = static_cast<size_t>(row) * 256 + byte;
  int32_t t = trans_[at];
  if (t != kUnknown) return t;
  t = compute_step(state, byte);
  trans_[at] = t;  // trans_ may have grown: index again
  return t;
}

int32_t Runtime::run(int32_t state, std::string_view bytes) {
  for (char c : bytes) {
    if (state < 0) return kDead;
    state = step(state, static_cast<uint8_t>(c));
  }
  return state;
}

bool Runtime::maybe_reset() {
  if (states_.size() < state_limit_ && nodes_.size() < node_limit_) return false;
  // Replaying a long text recreates about one state per byte; raising the limits past what we
  // had keeps a long generation from resetting at every step (amortized linear cost).
  state_limit_ = std::max(kMaxStates, 2 * states_.size());
  node_limit_ = std::max(kMaxNodes, 2 * nodes_.size());
  reset();
  return true;
}

const uint64_t* Runtime::mask(int32_t state) {
  const size_t words = static_cast<size_t>(index_->num_mask_words());
  if (int32_t slot = states_[static_cast<size_t>(state)].mask_slot; slot >= 0) {
    return masks_.data() + static_cast<size_t>(slot) * words;
  }
  std::vector<uint64_t> m(words, 0);
  const TokenIndex::Trie& t = index_->trie();
  walk_.assign(static_cast<size_t>(index_->max_depth()) + 1, kDead);
  walk_[0] = state;
  const int32_t num_nodes = static_cast<int32_t>(t.byte.size());
  const uint8_t* bytes = t.byte.data();
  const uint16_t* depth = t.depth.data();
  for (int32_t i = 0; i < num_nodes;) {
    const int32_t from = walk_[depth[i] - 1];
    const int32_t row = states_[static_cast<size_t>(from)].row;
    int32_t to = row >= 0 ? trans_[static_cast<size_t>(row) * 256 + bytes[i]] : kUnknown;
    if (to == kUnknown) to = step(from, bytes[i]);
    if (to == kDead) {
      i = t.end[i];
      continue;
    }
    for (int32_t k = t.tok_off[i]; k < t.tok_off[i + 1]; ++k) {
      const int32_t id = t.tok[k];
      m[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    }
    walk_[t.depth[i]] = to;
    ++i;
  }
  if (states_[static_cast<size_t>(state)].accept) {
    for (int32_t id : index_->eog_tokens()) m[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
  }
  if ((static_cast<size_t>(num_masks_) + 1) * words * 8 > kMaxMaskBytes) {
    for (State& s : states_) s.mask_slot = -1;
    masks_.clear();
    num_masks_ = 0;
  }
  masks_.insert(masks_.end(), m.begin(), m.end());
  states_[static_cast<size_t>(state)].mask_slot = num_masks_++;
  return masks_.data() + static_cast<size_t>(num_masks_ - 1) * words;
}

const uint64_t* Runtime::trigger_mask(std::string_view trigger, size_t matched) {
  if (trigger_ != trigger) {
    trigger_ = std::string(trigger);
    trigger_masks_.assign(trigger.size(), {});
  }
  std::vector<uint64_t>& m = trigger_masks_[matched];
  if (!m.empty()) return m.data();
  const int32_t V = index_->n_vocab();
  m.assign(static_cast<size_t>(index_->num_mask_words()), 0);
  for (int32_t id = 0; id < V; ++id) {
    bool eog = std::find(index_->eog_tokens().begin(), index_->eog_tokens().end(), id) != index_->eog_tokens().end();
    if (eog) continue;
    const std::string& b = index_->token_text(id);
    // Does this token complete the trigger? Plain scan of trigger[matched..] + b (triggers are short).
    std::string probe = std::string(trigger.substr(0, matched)) + b;
    const size_t at = probe.find(trigger);
    bool ok = true;
    if (at != std::string::npos) {
      const int32_t s = run(initial_, std::string_view(probe).substr(at + trigger.size()));
      ok = s != kDead;
    }
    if (ok) m[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
  }
  return m.data();
}

}  // namespace ts::structured
