#include "engine/spec_draft.h"

#include <algorithm>

#include "model/model.h"

namespace ts::engine {

namespace {
int32_t argmax(const float* row, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}
}  // namespace

DraftRunner::DraftRunner(model::Model& draft, model::KvStorage kv, int32_t block_size, int32_t num_blocks)
    : draft_(draft), kv_(std::move(kv)), blocks_(num_blocks, false), block_size_(block_size) {}

Result<std::unique_ptr<DraftRunner>> DraftRunner::create(model::Model& draft, model::KvType kv_type,
                                                         int32_t block_size, int32_t num_blocks) {
  TS_ASSIGN_OR_RETURN(auto kv, model::KvStorage::create(draft.config(), kv_type, block_size, num_blocks));
  return std::unique_ptr<DraftRunner>(new DraftRunner(draft, std::move(kv), block_size, num_blocks));
}

bool DraftRunner::ensure(SeqKv& s, int32_t num_tokens) {
  const int32_t need = (num_tokens + block_size_ - 1) / block_size_ - static_cast<int32_t>(s.table.size());
  if (need <= 0) return true;
  if (need > blocks_.num_free()) return false;
  for (int32_t i = 0; i < need; ++i) s.table.push_back(blocks_.allocate());
  return true;
}

void DraftRunner::rollback(int64_t seq_id, int32_t num_valid) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  SeqKv& s = it->second;
  s.computed = std::min(s.computed, std::max(0, num_valid));
  const size_t keep = static_cast<size_t>((s.computed + block_size_ - 1) / block_size_);
  while (s.table.size() > keep) {
    blocks_.release(s.table.back());
    s.table.pop_back();
  }
}

int32_t DraftRunner::num_behind(int64_t seq_id, int32_t num_tokens) const {
  auto it = seqs_.find(seq_id);
  const int32_t computed = it == seqs_.end() ? 0 : std::min(it->second.computed, num_tokens - 1);
  return std::max(1, num_tokens - computed);
}

void DraftRunner::forget(int64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  for (auto b = it->second.table.rbegin(); b != it->second.table.rend(); ++b) blocks_.release(*b);
  seqs_.erase(it);
}

Status DraftRunner::propose(std::span<DraftQuery> queries, ThreadPool* pool) {
  const int32_t V = draft_.config().n_vocab;
  std::vector<int32_t> toks;
  std::vector<model::SeqSlice> slices;
  std::vector<size_t> active;  // query indices in this forward
  for (DraftQuery& q : queries) q.out->clear();

  // Pass 0: catch each sequence's draft KV up to its tokens; the last row drafts token 1.
  auto fail = [&](const Status& st) {
    for (DraftQuery& q : queries) {
      q.out->clear();
      forget(q.seq_id);
    }
    return st;
  };
  for (size_t i = 0; i < queries.size(); ++i) {
    DraftQuery& q = queries[i];
    SeqKv& s = seqs_[q.seq_id];
    const int32_t n = static_cast<int32_t>(q.tokens.size());
    if (s.computed >= n) rollback(q.seq_id, n - 1);  // recompute the last token for its logits
    // Room for the catch-up plus the k - 1 drafted tokens fed back.
    if (!ensure(s, n + q.k - 1)) continue;
    toks.insert(toks.end(), q.tokens.begin() + s.computed, q.tokens.end());
    slices.push_back({.num_tokens = n - s.computed, .start_pos = s.computed,
                      .block_table = std::span<const int32_t>(s.table), .num_logits = 1});
    active.push_back(i);
  }
  for (int32_t step = 0; !active.empty(); ++step) {
    logits_.resize(active.size() * static_cast<size_t>(V));
    model::ForwardBatch batch{.tokens = toks, .seqs = slices};
    Status st = draft_.forward(batch, kv_, logits_.data(), pool);
    if (!st.ok()) return fail(st);
    std::vector<size_t> next;
    toks.clear();
    std::vector<model::SeqSlice> next_slices;
    for (size_t r = 0; r < active.size(); ++r) {
      DraftQuery& q = queries[active[r]];
      SeqKv& s = seqs_[q.seq_id];
      s.computed = slices[r].start_pos + slices[r].num_tokens;
      const int32_t t = argmax(logits_.data() + r * static_cast<size_t>(V), V);
      q.out->push_back(t);
      if (static_cast<int32_t>(q.out->size()) >= q.k) continue;
      toks.push_back(t);
      next_slices.push_back({.num_tokens = 1, .start_pos = s.computed,
                             .block_table = std::span<const int32_t>(s.table), .num_logits = 1});
      next.push_back(active[r]);
    }
    active.swap(next);
    slices.swap(next_slices);
  }
  return Status();
}

}  // namespace ts::engine
