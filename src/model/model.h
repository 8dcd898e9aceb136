// Decoder-only transformer (llama, mistral, qwen2, smollm, qwen3, qwen3moe, gemma3, phi3 ...):
// hyper-parameters from GGUF metadata,
// weights prepared for the tensor kernels, and a forward pass over a batch of tokens drawn from
// many sequences whose KV lives in a paged KvStorage.
//
// The model never schedules, samples or decides which KV blocks a sequence owns: the engine
// passes each sequence's block table (one per KV group when the storage keeps sliding-window
// layers window-only, see KvLayout). forward() writes K/V of the new tokens into those blocks
// and reads all earlier positions (within each layer's window) from them.
//
// Thread-safety: load() is thread-safe; forward() uses per-model scratch and must be called by
// one thread at a time (the engine thread). config()/tokenizer() are immutable after load.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/kv_storage.h"
#include "model/model_config.h"

namespace ts::gguf { class GgufFile; }
namespace ts::tokenizer { class Tokenizer; }

namespace ts::model {

struct LoadOptions {
  // Reserved for future weight repacking choices.
  bool repack = true;
  // Context the engine will run (0 = the file's context_length); picks LongRoPE's long or
  // short factors (phi3), as llama.cpp does from its n_ctx.
  int32_t n_ctx = 0;
  // Attention over an F16 KV cache with llama.cpp's fp16 V accumulator, bit for bit (the
  // default), or with an f32 one (false; model/attention.h, AttentionParams::f16_ggml). The
  // environment variable TOKENSERVE_F16_ATTN=f32 (or =ggml) overrides it at load.
  bool f16_ggml_attention = true;
};

// One sequence's slice of a forward batch. Its tokens are contiguous in ForwardBatch::tokens,
// in the order of ForwardBatch::seqs.
struct SeqSlice {
  int32_t num_tokens = 0;               // tokens of this sequence in this step (>= 1)
  int32_t start_pos = 0;                // position of the first one (= tokens already in KV)
  std::span<const int32_t> block_table; // KV blocks covering positions [0, start_pos + num_tokens)
  int32_t num_logits = 1;               // logits wanted for the last num_logits tokens (0..num_tokens)
  // Per KV group of the storage (KvStorage::layout(); window-only storage of sliding-window
  // layers): group g's block table, covering the same positions. A sliding-window group's table
  // may hold KvLayout::kNoBlock for blocks wholly before the window of this slice's first
  // query, (b + 1) * block_size <= start_pos - window + 1: attention never reads them.
  // Empty: block_table serves every group.
  std::span<const std::span<const int32_t>> group_tables = {};
};

struct ForwardBatch {
  std::span<const int32_t> tokens;      // [total tokens]
  std::span<const SeqSlice> seqs;
};

// Per-dimension-pair RoPE divisors for llama3 scaling (head_dim / 2 values).
std::vector<float> llama3_rope_factors(const ModelConfig& c);

// Weight memory after load: bytes the matrices keep resident (repacked arenas, or the mapped
// file pages they read), and mapped source pages given back after repacking.
struct WeightMemory {
  size_t resident = 0;
  size_t released = 0;
};

class Model {
 public:
  struct Weights;  // model_weights.h (internal to src/model)

  // Opens the GGUF, reads hyper-parameters, builds the tokenizer and prepares weights.
  // Errors: kNotFound, kDataLoss (corrupt file), kUnimplemented (architecture / tensor type),
  // kInvalidArgument (inconsistent shapes), each with a message naming the problem.
  static Result<std::unique_ptr<Model>> load(const std::string& path, LoadOptions opts = {});
  ~Model();

  const ModelConfig& config() const { return config_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  const gguf::GgufFile& gguf() const { return *gguf_; }
  // Weight bytes read per forward step (for bandwidth reports).
  size_t weight_bytes() const { return weight_bytes_; }
  WeightMemory weight_memory() const;
  // F16 KV attention accumulator (LoadOptions::f16_ggml_attention); may be changed between
  // forward calls.
  bool f16_ggml_attention() const { return f16_ggml_attention_; }
  void set_f16_ggml_attention(bool on) { f16_ggml_attention_ = on; }

  // Runs the batch. logits: [sum of num_logits][n_vocab], sequences in order, positions in
  // order. Errors (kInvalidArgument) for a position past the KV storage or the block table,
  // a token id out of range, or an empty batch; KV is unchanged for later positions then.
  Status forward(const ForwardBatch& batch, KvStorage& kv, float* logits, ThreadPool* pool);

  // Sizes the per-forward activation buffers for batches of up to max_tokens tokens now
  // (zero-filled, so their pages are faulted in here), instead of on the first forward that
  // brings that many: the engine calls it at start with its max_batch_tokens, so the first
  // long prompt does not pay for the page faults (~70-90 ms for a 511-token prompt of a
  // 1024-wide model on a Zen 5 VM). Not thread-safe with forward().
  void reserve(int64_t max_tokens);

 private:
  struct Scratch;
  Model();
  void grow_scratch(int64_t T);
  Status init(const std::string& path, const LoadOptions& opts);

  ModelConfig config_;
  std::unique_ptr<gguf::GgufFile> gguf_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<Weights> weights_;
  std::unique_ptr<Scratch> scratch_;
  size_t weight_bytes_ = 0;
  bool f16_ggml_attention_ = true;
};

}  // namespace ts::model
