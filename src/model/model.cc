// The one forward skeleton for every supported architecture. Per-architecture behaviour comes
// from ModelConfig (hyper-parameters) and its ArchSpec (which pieces exist): fused or separate
// projections, q/k norms, sliding-window layers, post-norms, dense or MoE FFN, GELU or SiLU.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "gguf/gguf.h"
#include "model/attention.h"
#include "model/forward_profile.h"
#include "model/fused_matmul.h"
#include "model/model_weights.h"
#include "model/ops.h"
#include "tokenizer/tokenizer.h"

namespace ts::model {

using tensor::Matrix;

// Per-forward scratch, grown on demand (never shrinks; no allocation at steady state).
struct Model::Scratch {
  int64_t cap_tokens = 0;
  std::vector<float> x, h, q, k, v, qkv, attn, ffn_a, ffn_b, moe_out;  // activations
  // RoPE tables [tokens][head_dim/2]: global layers, and sliding-window layers when their base differs.
  std::vector<float> rope_cos, rope_sin, rope_cos_swa, rope_sin_swa;
  std::vector<int32_t> positions;                          // per token
  std::vector<int64_t> seq_first;                          // first batch token of each sequence
  std::vector<float> logit_in;                             // [num logits][n_embd]
  AttentionScratch attn_scratch;
  MoeScratch moe;
  // Window-only KV (several KV groups): the batch's slices with each group's block table.
  std::vector<std::vector<SeqSlice>> group_seqs;
  // The normed hidden states h, quantized once for the matrices that read them (Q/K/V; gate/up).
  tensor::PreparedActivations h_prep;
};

Model::Model() = default;
Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::load(const std::string& path, LoadOptions opts) {
  std::unique_ptr<Model> m(new Model());
  TS_RETURN_IF_ERROR(m->init(path, opts));
  return m;
}

// Llama 3.1-style frequency-dependent RoPE scaling: long wavelengths are divided by the scale
// factor, short ones kept, and the band between smoothly interpolated. Used when a file names
// the llama3 scaling in metadata but carries no rope_freqs tensor.
std::vector<float> llama3_rope_factors(const ModelConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<float> f(half);
  const double low_wavelen = c.rope_orig_ctx / c.rope_low_freq_factor;
  const double high_wavelen = c.rope_orig_ctx / c.rope_high_freq_factor;
  for (int i = 0; i < half; ++i) {
    const double freq = std::pow(static_cast<double>(c.rope_base), -2.0 * i / c.head_dim);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) {
      f[i] = 1.0f;
    } else if (wavelen > low_wavelen) {
      f[i] = c.rope_scale_factor;
    } else {
      const double smooth = (c.rope_orig_ctx / wavelen - c.rope_low_freq_factor) /
                            (c.rope_high_freq_factor - c.rope_low_freq_factor);
      f[i] = static_cast<float>(1.0 / ((1 - smooth) / c.rope_scale_factor + smooth));
    }
  }
  return f;
}

Status Model::init(const std::string& path, const LoadOptions& opts) {
  TS_ASSIGN_OR_RETURN(gguf_, gguf::GgufFile::open(path, {.require_compute_types = true}));
  TS_ASSIGN_OR_RETURN(config_, read_model_config(*gguf_, {.n_ctx = opts.n_ctx}));
  if (config_.name == config_.arch) config_.name = std::filesystem::path(path).stem().string();
  TS_ASSIGN_OR_RETURN(tokenizer_, tokenizer::Tokenizer::from_gguf(*gguf_));
  // Padded embedding matrices are allowed; a vocabulary larger than the matrix is not.
  if (tokenizer_->n_vocab() > config_.n_vocab) {
    return data_loss("tokenizer has " + std::to_string(tokenizer_->n_vocab()) + " tokens but token_embd only " +
                     std::to_string(config_.n_vocab) + " rows");
  }
  f16_ggml_attention_ = opts.f16_ggml_attention;
  if (const char* e = std::getenv("TOKENSERVE_F16_ATTN")) {
    const std::string v = e;
    if (v == "ggml") {
      f16_ggml_attention_ = true;
    } else if (v == "f32") {
      f16_ggml_attention_ = false;
    } else if (!v.empty()) {
      return invalid_argument("TOKENSERVE_F16_ATTN must be ggml or f32, not '" + v + "'");
    }
  }
  weights_ = std::make_unique<Weights>();
  TS_ASSIGN_OR_RETURN(weight_bytes_, load_weights(*gguf_, config_, *weights_));
  scratch_ = std::make_unique<Scratch>();
  return ok_status();
}

WeightMemory Model::weight_memory() const { return model::weight_memory(*weights_); }

namespace {

void grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
}

// Validates the batch before any state is touched; returns the number of logit rows.
Result<int64_t> check_batch(const ForwardBatch& batch, const KvStorage& kv, const ModelConfig& c) {
  const int64_t T = static_cast<int64_t>(batch.tokens.size());
  if (T == 0 || batch.seqs.empty()) return invalid_argument("empty forward batch");
  if (kv.n_layer() != c.n_layer || kv.n_head_kv() != c.n_head_kv || kv.head_dim() != c.head_dim) {
    return invalid_argument("KV storage shape does not match the model");
  }
  const KvLayout& layout = kv.layout();
  int64_t counted = 0, num_logits = 0;
  for (const SeqSlice& s : batch.seqs) {
    if (s.num_tokens <= 0 || s.start_pos < 0 || s.num_logits < 0 || s.num_logits > s.num_tokens) {
      return invalid_argument("bad sequence slice in forward batch");
    }
    if (!s.group_tables.empty() && static_cast<int32_t>(s.group_tables.size()) != layout.num_groups()) {
      return invalid_argument("sequence slice has " + std::to_string(s.group_tables.size()) +
                              " block tables for a KV cache of " + std::to_string(layout.num_groups()) + " groups");
    }
    const int64_t end = int64_t{s.start_pos} + s.num_tokens;
    for (int32_t g = 0; g < layout.num_groups(); ++g) {
      const std::span<const int32_t> table = s.group_tables.empty() ? s.block_table : s.group_tables[static_cast<size_t>(g)];
      if (end > static_cast<int64_t>(table.size()) * kv.block_size()) {
        return invalid_argument("positions up to " + std::to_string(end) + " exceed the sequence's " +
                                std::to_string(table.size()) + " KV blocks");
      }
      const int32_t window = layout.group_window[static_cast<size_t>(g)];
      for (int64_t b = 0; b < (end + kv.block_size() - 1) / kv.block_size(); ++b) {
        const int32_t id = table[static_cast<size_t>(b)];
        // A hole is fine only where no query of this slice looks (before the first one's window).
        const bool hole_ok = id == KvLayout::kNoBlock && window > 0 &&
                             (b + 1) * kv.block_size() <= int64_t{s.start_pos} - window + 1;
        if (!hole_ok && (id < 0 || id >= kv.num_blocks())) {
          return invalid_argument("block id " + std::to_string(id) + " out of range");
        }
      }
    }
    counted += s.num_tokens;
    num_logits += s.num_logits;
  }
  if (counted != T) return invalid_argument("sequence token counts do not add up to the batch size");
  for (int32_t t : batch.tokens) {
    if (t < 0 || t >= c.n_vocab) return invalid_argument("token id " + std::to_string(t) + " out of range");
  }
  return num_logits;
}

// x[t * stride + i] += b[i] for i in [i0, i1) of each of T rows.
void add_bias(float* x, const std::vector<float>& b, int64_t T, int64_t stride, int64_t i0, int64_t i1) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = i0; i < i1; ++i) x[t * stride + i] += b[static_cast<size_t>(i)];
}

// Per-head RMSNorm of n_heads vectors of head_dim for each of T tokens.
void head_norm(float* x, int64_t T, int32_t n_heads, int32_t hd, const std::vector<float>& w, float eps) {
  for (int64_t i = 0; i < T * n_heads; ++i) rms_norm(x + i * hd, w.data(), x + i * hd, hd, eps);
}

}  // namespace

void Model::grow_scratch(int64_t T) {
  const ModelConfig& c = config_;
  const ArchSpec& spec = *c.spec;
  const int64_t E = c.n_embd, HD = c.head_dim, QD = int64_t{c.n_head} * HD, KD = int64_t{c.n_head_kv} * HD;
  const int64_t F = c.n_expert > 0 ? c.n_ff_exp : c.n_ff;
  Scratch& S = *scratch_;
  S.cap_tokens = T;
  for (auto* v : {&S.x, &S.h}) grow(*v, T * E);
  if (c.n_expert > 0) grow(S.moe_out, T * E);
  for (auto* v : {&S.q, &S.attn}) grow(*v, T * QD);
  for (auto* v : {&S.k, &S.v}) grow(*v, T * KD);
  if (spec.fused_qkv) grow(S.qkv, T * (QD + 2 * KD));
  grow(S.ffn_a, T * F);
  grow(S.ffn_b, T * F * (spec.fused_gate_up ? 2 : 1));
  for (auto* v : {&S.rope_cos, &S.rope_sin}) grow(*v, T * HD / 2);
  if (c.num_swa_layers() > 0) for (auto* v : {&S.rope_cos_swa, &S.rope_sin_swa}) grow(*v, T * HD / 2);
  S.positions.resize(T);
}

void Model::reserve(int64_t max_tokens) {
  if (max_tokens <= scratch_->cap_tokens) return;
  grow_scratch(max_tokens);
  // The quantized activation forms every distinct (weight type, input width) of the layers
  // reads, made once from zeros, so the layers' PreparedActivations buffers grow here as well.
  // What still grows on the first long step: the pool threads' own buffers (kernel panels,
  // attention tiles, fused_matmul's row blocks; per chunk, far smaller) and MoE experts'.
  Scratch& S = *scratch_;
  std::vector<std::pair<uint32_t, int64_t>> seen;
  std::vector<float> zeros;
  for (const auto& L : weights_->layers) {
    for (const tensor::Matrix* m : {&L.wq, &L.wk, &L.wv, &L.wqkv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
      if (m->resident_bytes() == 0) continue;  // absent in this architecture
      const std::pair<uint32_t, int64_t> key{static_cast<uint32_t>(m->type()), m->cols()};
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(key);
      if (static_cast<int64_t>(zeros.size()) < max_tokens * m->cols()) zeros.resize(static_cast<size_t>(max_tokens * m->cols()));
      S.h_prep.reset(zeros.data(), max_tokens, m->cols());
      m->prepare(S.h_prep, nullptr);
    }
  }
  S.h_prep.reset(nullptr, 0, 0);
}

Status Model::forward(const ForwardBatch& batch, KvStorage& kv, float* logits, ThreadPool* pool) {
  const ModelConfig& c = config_;
  const ArchSpec& spec = *c.spec;
  TS_ASSIGN_OR_RETURN(const int64_t num_logits, check_batch(batch, kv, c));
  const int64_t T = static_cast<int64_t>(batch.tokens.size());
  const int64_t E = c.n_embd, HD = c.head_dim, QD = int64_t{c.n_head} * HD, KD = int64_t{c.n_head_kv} * HD;
  const int64_t F = c.n_expert > 0 ? c.n_ff_exp : c.n_ff;
  const bool has_swa = c.num_swa_layers() > 0;
  Scratch& S = *scratch_;
  if (T > S.cap_tokens) grow_scratch(T);
  grow(S.logit_in, num_logits * E);

  // Each layer reads and writes its KV group's block tables.
  const KvLayout& layout = kv.layout();
  if (layout.hybrid()) {
    S.group_seqs.resize(static_cast<size_t>(layout.num_groups()));
    for (int32_t g = 0; g < layout.num_groups(); ++g) {
      auto& gs = S.group_seqs[static_cast<size_t>(g)];
      gs.assign(batch.seqs.begin(), batch.seqs.end());
      for (SeqSlice& s : gs) {
        if (!s.group_tables.empty()) s.block_table = s.group_tables[static_cast<size_t>(g)];
      }
    }
  }
  auto seqs_of = [&](int32_t layer) -> std::span<const SeqSlice> {
    if (!layout.hybrid()) return batch.seqs;
    return S.group_seqs[static_cast<size_t>(layout.group_of_layer[static_cast<size_t>(layer)])];
  };

  const Weights& w = *weights_;
  {
    int64_t t = 0;
    for (const SeqSlice& s : batch.seqs) {
      for (int32_t j = 0; j < s.num_tokens; ++j, ++t) S.positions[t] = s.start_pos + j;
    }
    S.seq_first.resize(batch.seqs.size());
    int64_t f = 0;
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
      S.seq_first[i] = f;
      f += batch.seqs[i].num_tokens;
    }
  }
  // Embeddings (gemma: scaled by sqrt(n_embd)) and RoPE tables.
  const float embd_scale = std::sqrt(static_cast<float>(E));
  const RopeParams rope_global{.head_dim = c.head_dim, .base = c.rope_base,
                               .freq_scale = c.rope_scaling == RopeScaling::kLinear ? 1.0f / c.rope_scale_factor : 1.0f,
                               .factors = w.rope_freq_factors,
                               .mscale = c.rope_attn_factor};
  const RopeParams rope_swa{.head_dim = c.head_dim, .base = c.rope_base_swa, .mscale = c.rope_attn_factor};
  for (int64_t t = 0; t < T; ++t) {
    float* xt = S.x.data() + t * E;
    w.token_embd.dequantize_row(batch.tokens[t], xt);
    if (spec.embd_scale) for (int64_t i = 0; i < E; ++i) xt[i] *= embd_scale;
    rope_angles(rope_global, S.positions[t], S.rope_cos.data() + t * HD / 2, S.rope_sin.data() + t * HD / 2);
    if (has_swa) {
      rope_angles(rope_swa, S.positions[t], S.rope_cos_swa.data() + t * HD / 2, S.rope_sin_swa.data() + t * HD / 2);
    }
  }

  prof::Lap lap(T);
  lap(prof::kEmbed);
  const MoeParams moe_params{.n_embd = c.n_embd, .n_ff_exp = c.n_ff_exp, .n_expert_used = c.n_expert_used,
                             .norm_weights = c.expert_weights_norm, .act = spec.act};
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const auto& L = w.layers[l];
    const bool swa = c.layer_is_swa(l);
    // --- attention block ---
    // Later layers get their attention norm fused into the previous layer's residual add.
    if (l == 0) rms_norm_rows(S.x.data(), L.attn_norm.data(), S.h.data(), T, E, c.rms_eps, pool);
    lap(prof::kNorm);
    S.h_prep.reset(S.h.data(), T, E);  // Q, K and V share one activation quantization
    if (spec.fused_qkv) {
      L.wqkv.matmul(S.h_prep, S.qkv.data(), pool);
      const int64_t W = QD + 2 * KD;
      for (int64_t t = 0; t < T; ++t) {
        const float* r = S.qkv.data() + t * W;
        std::memcpy(S.q.data() + t * QD, r, sizeof(float) * QD);
        std::memcpy(S.k.data() + t * KD, r + QD, sizeof(float) * KD);
        std::memcpy(S.v.data() + t * KD, r + QD + KD, sizeof(float) * KD);
      }
    } else {
      const MatmulPart qkv[] = {{&L.wq, S.q.data()}, {&L.wk, S.k.data()}, {&L.wv, S.v.data()}};
      fused_matmuls(qkv, S.h_prep, pool);
    }
    lap(prof::kQkv);
    // Bias, q/k norms, RoPE and the KV store of sequence si's new tokens, for KV heads
    // [kb, ke) and their query heads: per token and head independent, so paged_attention runs
    // it for each (sequence, KV head) just before attending it (a decode step: on the thread
    // that attends it, no separate pool job) or first, split over the pool by sequence (each
    // sequence writes only its own KV slots).
    const float* cos_tab = swa ? S.rope_cos_swa.data() : S.rope_cos.data();
    const float* sin_tab = swa ? S.rope_sin_swa.data() : S.rope_sin.data();
    const std::span<const SeqSlice> layer_seqs = seqs_of(l);
    auto qk_post = [&](int32_t si, int32_t kb, int32_t ke) {
      const int64_t t0 = S.seq_first[static_cast<size_t>(si)];
      const int64_t nt = layer_seqs[static_cast<size_t>(si)].num_tokens;
      const int32_t g = c.n_head / c.n_head_kv;
      const int64_t q0 = int64_t{kb} * g * HD, q1 = int64_t{ke} * g * HD;  // this part of each row
      const int64_t k0 = int64_t{kb} * HD, k1 = int64_t{ke} * HD;
      float* q = S.q.data() + t0 * QD;
      float* k = S.k.data() + t0 * KD;
      float* v = S.v.data() + t0 * KD;
      if (!L.bq.empty()) {
        add_bias(q, L.bq, nt, QD, q0, q1);
        add_bias(k, L.bk, nt, KD, k0, k1);
        add_bias(v, L.bv, nt, KD, k0, k1);
      }
      for (int64_t t = 0; t < nt; ++t) {
        float* qt = q + t * QD + q0;
        float* kt = k + t * KD + k0;
        if (!L.q_norm.empty()) {
          head_norm(qt, 1, (ke - kb) * g, c.head_dim, L.q_norm, c.rms_eps);
          head_norm(kt, 1, ke - kb, c.head_dim, L.k_norm, c.rms_eps);
        }
        const float* cs = cos_tab + (t0 + t) * HD / 2;
        const float* sn = sin_tab + (t0 + t) * HD / 2;
        apply_rope(qt, (ke - kb) * g, c.head_dim, c.rope_neox, cs, sn);
        apply_rope(kt, ke - kb, c.head_dim, c.rope_neox, cs, sn);
      }
      write_kv(kv, l, layer_seqs.subspan(static_cast<size_t>(si), 1), k, v, kb, ke);
    };
    struct PrologueCtx {
      decltype(qk_post)* fn;
      static void call(void* ctx, int32_t si, int32_t kb, int32_t ke) { (*static_cast<PrologueCtx*>(ctx)->fn)(si, kb, ke); }
    } pro_ctx{&qk_post};
    const AttentionPrologue prologue{.fn = &PrologueCtx::call, .ctx = &pro_ctx};
    lap(prof::kRopeBias);
    lap(prof::kKvWrite);  // now inside paged_attention (the prologue)
    const AttentionParams ap{.n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim,
                             .scale = c.attn_scale, .window = swa ? c.sliding_window : 0,
                             .f16_ggml = f16_ggml_attention_};
    paged_attention(kv, l, ap, layer_seqs, S.q.data(), S.attn.data(), S.attn_scratch, pool, &prologue);
    lap(prof::kAttention);
    S.h_prep.reset(S.attn.data(), T, QD);  // Q/K/V are done with h's forms: the buffers quantize attn
    L.wo.matmul(S.h_prep, S.h.data(), pool);
    if (!L.post_attn_norm.empty()) {
      rms_norm_rows(S.h.data(), L.post_attn_norm.data(), S.h.data(), T, E, c.rms_eps, pool);
    }
    // --- feed-forward block (residual add + ffn norm in one pass) ---
    lap(prof::kOProj);
    add_rms_norm_rows(S.x.data(), S.h.data(), L.ffn_norm.data(), S.h.data(), T, E, c.rms_eps, pool);
    lap(prof::kFfnNorm);
    if (c.n_expert > 0) {
      moe_ffn(L.moe, moe_params, S.h.data(), T, S.moe_out.data(), S.moe, pool);
      std::memcpy(S.h.data(), S.moe_out.data(), sizeof(float) * T * E);
    } else {
      S.h_prep.reset(S.h.data(), T, E);  // gate and up share one activation quantization
      if (spec.fused_gate_up) {
        // ffn_up rows are [gate; up]: split each token's 2F outputs.
        L.w_up.matmul(S.h_prep, S.ffn_b.data(), pool);
        for (int64_t t = 0; t < T; ++t) {
          std::memcpy(S.ffn_a.data() + t * F, S.ffn_b.data() + t * 2 * F, sizeof(float) * F);
          std::memmove(S.ffn_b.data() + t * F, S.ffn_b.data() + t * 2 * F + F, sizeof(float) * F);
        }
      } else {
        fused_gate_up(L.w_gate, L.w_up, S.h_prep, spec.act != FfnAct::kGeluTanh, S.ffn_a.data(), S.ffn_b.data(), pool);
      }
      if (spec.fused_gate_up) {
        if (spec.act == FfnAct::kGeluTanh) {
          geglu_ggml(S.ffn_a.data(), S.ffn_b.data(), T * F, pool);
        } else {
          swiglu(S.ffn_a.data(), S.ffn_b.data(), T * F, pool);
        }
      }
      lap(prof::kGateUp);
      S.h_prep.reset(S.ffn_a.data(), T, F);  // gate/up are done with h: the same buffers quantize ffn_a
      L.w_down.prepare(S.h_prep, pool);
      lap(prof::kDownPrep);
      L.w_down.matmul(S.h_prep, S.h.data(), pool);
    }
    lap(prof::kDown);
    if (!L.post_ffw_norm.empty()) {
      rms_norm_rows(S.h.data(), L.post_ffw_norm.data(), S.h.data(), T, E, c.rms_eps, pool);
    }
    if (l + 1 < c.n_layer) {
      add_rms_norm_rows(S.x.data(), S.h.data(), w.layers[l + 1].attn_norm.data(), S.h.data(), T, E, c.rms_eps, pool);
    } else {
      add_inplace(S.x.data(), S.h.data(), T * E, pool);
    }
    lap(prof::kDownAdd);
  }

  // Final norm and output projection only for the rows that need logits.
  int64_t row = 0, t0 = 0;
  for (const SeqSlice& s : batch.seqs) {
    for (int32_t j = s.num_tokens - s.num_logits; j < s.num_tokens; ++j) {
      rms_norm(S.x.data() + (t0 + j) * E, w.output_norm.data(), S.logit_in.data() + row * E, E, c.rms_eps);
      ++row;
    }
    t0 += s.num_tokens;
  }
  if (num_logits > 0) {
    w.output->matmul(S.logit_in.data(), num_logits, logits, pool);
    if (c.final_logit_softcap > 0) softcap(logits, num_logits * c.n_vocab, c.final_logit_softcap);
  }
  lap(prof::kLogits);
  return ok_status();
}

}  // namespace ts::model
