// DraftRunner: the draft model of `--speculative draft`. It keeps its own paged KV (a KvStorage
// and a BlockPool of its own, no prefix cache) with one block table per target sequence, and
// proposes each sequence's next K tokens greedily (argmax of the draft's logits: a
// deterministic proposal, see spec_decode.h), batched over all sequences: one forward that
// catches every sequence's draft KV up to its current tokens, then one single-token forward
// per further drafted position over the sequences still drafting.
//
// After verification the engine calls rollback() with the number of tokens whose KV is still
// valid (the verified prefix); draft KV past it is dropped and its blocks freed. forget()
// releases a sequence's blocks (finish, preemption, cancellation).
//
// Not thread-safe: engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/block_pool.h"
#include "model/kv_storage.h"

namespace ts::model { class Model; }

namespace ts::engine {

// One sequence's drafting request.
struct DraftQuery {
  int64_t seq_id = 0;                // engine sequence id (key of its draft KV)
  std::span<const int32_t> tokens;   // the sequence's verified tokens (prompt + output)
  int32_t k = 0;                     // tokens wanted (>= 1)
  std::vector<int32_t>* out = nullptr;  // receives up to k drafted tokens (fewer when KV runs out)
};

class DraftRunner {
 public:
  // Allocates num_blocks draft KV blocks of block_size tokens. `draft` outlives the runner.
  // Errors: kInvalidArgument / kResourceExhausted from the KV allocation.
  static Result<std::unique_ptr<DraftRunner>> create(model::Model& draft, model::KvType kv_type,
                                                     int32_t block_size, int32_t num_blocks);

  // Drafts for every query (batched). A query whose draft KV does not fit the pool gets no
  // tokens. Errors: a failed draft forward (all outputs are cleared; draft KV of the queries is
  // forgotten, so the next call recomputes it).
  Status propose(std::span<DraftQuery> queries, ThreadPool* pool);
  // Keeps draft KV only for the first num_valid tokens of the sequence.
  void rollback(int64_t seq_id, int32_t num_valid);
  // Frees the sequence's draft KV (no-op when it has none).
  void forget(int64_t seq_id);
  // Tokens of a sequence of num_tokens that the next propose() must run through the draft
  // model before its first drafted token (its catch-up; all of them for an unknown sequence).
  int32_t num_behind(int64_t seq_id, int32_t num_tokens) const;
  int32_t num_blocks_used() const { return blocks_.num_used(); }
  size_t kv_bytes() const { return kv_.total_bytes(); }

 private:
  struct SeqKv {
    std::vector<int32_t> table;      // draft KV blocks
    int32_t computed = 0;            // leading tokens whose draft KV is valid
  };
  DraftRunner(model::Model& draft, model::KvStorage kv, int32_t block_size, int32_t num_blocks);
  bool ensure(SeqKv& s, int32_t num_tokens);  // block table covers num_tokens; false if no blocks

  model::Model& draft_;
  model::KvStorage kv_;
  BlockPool blocks_;
  int32_t block_size_;
  std::unordered_map<int64_t, SeqKv> seqs_;
  std::vector<float> logits_;
};

}  // namespace ts::engine
