#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "gguf/gguf.h"
#include "model/attention.h"
#include "tensor/dtype.h"
#include "tensor/fp16.h"
#include "tensor/matrix.h"
#include "tokenizer/tokenizer.h"

namespace ts::model {

using tensor::DType;
using tensor::Matrix;

struct Model::Weights {
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;  // [n_embd]
    std::vector<float> bq, bk, bv;           // qwen2 biases, or empty
    Matrix wq, wk, wv, wo, w_gate, w_up, w_down;
  };
  Matrix token_embd;              // [n_vocab][n_embd]
  Matrix output_own;              // untied output, when present
  const Matrix* output = nullptr; // token_embd when tied
  std::vector<float> output_norm; // [n_embd]
  std::vector<float> rope_freq_factors;  // [head_dim/2] or empty
  std::vector<Layer> layers;
};

// Per-forward scratch, grown on demand (never shrinks; no allocation at steady state).
struct Model::Scratch {
  int64_t cap_tokens = 0;
  std::vector<float> x, h, q, k, v, attn, ffn_a, ffn_b;  // activations
  std::vector<float> rope_cos, rope_sin;                   // [tokens][head_dim/2]
  std::vector<int32_t> positions;                          // per token
  std::vector<float> logit_in;                             // [num logits][n_embd]
  AttentionScratch attn_scratch;
};

Model::Model() = default;
Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::load(const std::string& path, LoadOptions opts) {
  std::unique_ptr<Model> m(new Model());
  TS_RETURN_IF_ERROR(m->init(path, opts));
  return m;
}

namespace {

Result<std::vector<float>> load_vector(const gguf::GgufFile& f, const std::string& name, int64_t n) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return data_loss("model lacks tensor '" + name + "'");
  if (t->num_elements != n) {
    return data_loss("tensor '" + name + "' has " + std::to_string(t->num_elements) + " elements, expected " +
                     std::to_string(n));
  }
  std::vector<float> out(n);
  auto dt = static_cast<DType>(t->type);
  if (dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16) {
    return unimplemented("tensor '" + name + "' has type " + tensor::type_name(t->type) + "; norms and biases must be f32/f16/bf16");
  }
  tensor::dequantize_row(dt, t->data, out.data(), n);
  return out;
}

Result<Matrix> load_matrix(const gguf::GgufFile& f, const std::string& name, int64_t rows, int64_t cols) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return data_loss("model lacks tensor '" + name + "'");
  if (t->shape.size() != 2 || t->cols() != cols || t->rows() != rows) {
    std::string got;
    for (int64_t d : t->shape) got += (got.empty() ? "" : "x") + std::to_string(d);
    return data_loss("tensor '" + name + "' has shape " + got + ", expected " + std::to_string(cols) + "x" +
                     std::to_string(rows));
  }
  auto r = Matrix::create(static_cast<DType>(t->type), t->data, rows, cols);
  if (!r.ok()) return Status(r.status().code(), "tensor '" + name + "': " + r.status().message());
  return r;
}

}  // namespace

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

namespace {

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(sum / n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

}  // namespace

Status Model::init(const std::string& path, const LoadOptions& opts) {
  TS_ASSIGN_OR_RETURN(gguf_, gguf::GgufFile::open(path, {.require_compute_types = true}));
  TS_ASSIGN_OR_RETURN(config_, read_model_config(*gguf_));
  if (config_.name == config_.arch) config_.name = std::filesystem::path(path).stem().string();
  TS_ASSIGN_OR_RETURN(tokenizer_, tokenizer::Tokenizer::from_gguf(*gguf_));
  if (tokenizer_->n_vocab() < config_.n_vocab) {
    // Padded embedding matrices are allowed; a vocabulary larger than the matrix is not.
  } else if (tokenizer_->n_vocab() > config_.n_vocab) {
    return data_loss("tokenizer has " + std::to_string(tokenizer_->n_vocab()) + " tokens but token_embd only " +
                     std::to_string(config_.n_vocab) + " rows");
  }
  const ModelConfig& c = config_;
  const int64_t E = c.n_embd, QD = int64_t{c.n_head} * c.head_dim, KD = int64_t{c.n_head_kv} * c.head_dim;
  weights_ = std::make_unique<Weights>();
  Weights& w = *weights_;
  TS_ASSIGN_OR_RETURN(w.token_embd, load_matrix(*gguf_, "token_embd.weight", c.n_vocab, E));
  if (!c.tied_output) {
    TS_ASSIGN_OR_RETURN(w.output_own, load_matrix(*gguf_, "output.weight", c.n_vocab, E));
    w.output = &w.output_own;
  } else {
    w.output = &w.token_embd;
  }
  TS_ASSIGN_OR_RETURN(w.output_norm, load_vector(*gguf_, "output_norm.weight", E));
  if (gguf_->find_tensor("rope_freqs.weight")) {
    TS_ASSIGN_OR_RETURN(w.rope_freq_factors, load_vector(*gguf_, "rope_freqs.weight", c.head_dim / 2));
  } else if (c.rope_scaling == RopeScaling::kLlama3) {
    w.rope_freq_factors = llama3_rope_factors(c);
  }
  w.layers.resize(c.n_layer);
  weight_bytes_ = w.output->weight_bytes();
  for (int32_t l = 0; l < c.n_layer; ++l) {
    auto& L = w.layers[l];
    std::string p = "blk." + std::to_string(l) + ".";
    TS_ASSIGN_OR_RETURN(L.attn_norm, load_vector(*gguf_, p + "attn_norm.weight", E));
    TS_ASSIGN_OR_RETURN(L.ffn_norm, load_vector(*gguf_, p + "ffn_norm.weight", E));
    TS_ASSIGN_OR_RETURN(L.wq, load_matrix(*gguf_, p + "attn_q.weight", QD, E));
    TS_ASSIGN_OR_RETURN(L.wk, load_matrix(*gguf_, p + "attn_k.weight", KD, E));
    TS_ASSIGN_OR_RETURN(L.wv, load_matrix(*gguf_, p + "attn_v.weight", KD, E));
    TS_ASSIGN_OR_RETURN(L.wo, load_matrix(*gguf_, p + "attn_output.weight", E, QD));
    TS_ASSIGN_OR_RETURN(L.w_gate, load_matrix(*gguf_, p + "ffn_gate.weight", c.n_ff, E));
    TS_ASSIGN_OR_RETURN(L.w_up, load_matrix(*gguf_, p + "ffn_up.weight", c.n_ff, E));
    TS_ASSIGN_OR_RETURN(L.w_down, load_matrix(*gguf_, p + "ffn_down.weight", E, c.n_ff));
    if (c.has_qkv_bias) {
      TS_ASSIGN_OR_RETURN(L.bq, load_vector(*gguf_, p + "attn_q.bias", QD));
      TS_ASSIGN_OR_RETURN(L.bk, load_vector(*gguf_, p + "attn_k.bias", KD));
      TS_ASSIGN_OR_RETURN(L.bv, load_vector(*gguf_, p + "attn_v.bias", KD));
    }
    for (const Matrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
      weight_bytes_ += m->weight_bytes();
    }
  }
  scratch_ = std::make_unique<Scratch>();
  return ok_status();
}

namespace {

// RoPE angles for one position into cos/sin[head_dim/2], computed in float the way ggml does
// (theta_i = p * base^(-2i/d), by repeated multiplication).
void rope_angles(const ModelConfig& c, const std::vector<float>& freq_factors, int32_t pos,
                 float* cos_out, float* sin_out) {
  const int half = c.head_dim / 2;
  const float theta_scale = std::pow(c.rope_base, -2.0f / static_cast<float>(c.head_dim));
  float freq_scale = 1.0f;
  if (c.rope_scaling == RopeScaling::kLinear) freq_scale = 1.0f / c.rope_scale_factor;
  float theta = static_cast<float>(pos) * freq_scale;
  for (int i = 0; i < half; ++i) {
    float t = theta;
    if (!freq_factors.empty()) t /= freq_factors[i];
    cos_out[i] = std::cos(t);
    sin_out[i] = std::sin(t);
    theta *= theta_scale;
  }
}

// Rotates n_heads vectors of head_dim at x in place.
void apply_rope(float* x, int n_heads, int head_dim, bool neox, const float* cs, const float* sn) {
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    if (neox) {
      for (int i = 0; i < half; ++i) {
        float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = a * sn[i] + b * cs[i];
      }
    } else {
      for (int i = 0; i < half; ++i) {
        float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * cs[i] - b * sn[i];
        v[2 * i + 1] = a * sn[i] + b * cs[i];
      }
    }
  }
}

}  // namespace

Status Model::forward(const ForwardBatch& batch, KvStorage& kv, float* logits, ThreadPool* pool) {
  const ModelConfig& c = config_;
  const int64_t T = static_cast<int64_t>(batch.tokens.size());
  if (T == 0 || batch.seqs.empty()) return invalid_argument("empty forward batch");
  if (kv.n_layer() != c.n_layer || kv.n_head_kv() != c.n_head_kv || kv.head_dim() != c.head_dim) {
    return invalid_argument("KV storage shape does not match the model");
  }
  // Validate the batch before touching any state.
  int64_t counted = 0, num_logits = 0;
  for (const SeqSlice& s : batch.seqs) {
    if (s.num_tokens <= 0 || s.start_pos < 0 || s.num_logits < 0 || s.num_logits > s.num_tokens) {
      return invalid_argument("bad sequence slice in forward batch");
    }
    int64_t end = int64_t{s.start_pos} + s.num_tokens;
    if (end > static_cast<int64_t>(s.block_table.size()) * kv.block_size()) {
      return invalid_argument("positions up to " + std::to_string(end) + " exceed the sequence's " +
                              std::to_string(s.block_table.size()) + " KV blocks");
    }
    for (int64_t b = 0; b < (end + kv.block_size() - 1) / kv.block_size(); ++b) {
      if (s.block_table[b] < 0 || s.block_table[b] >= kv.num_blocks()) {
        return invalid_argument("block id " + std::to_string(s.block_table[b]) + " out of range");
      }
    }
    counted += s.num_tokens;
    num_logits += s.num_logits;
  }
  if (counted != T) return invalid_argument("sequence token counts do not add up to the batch size");
  for (int32_t t : batch.tokens) {
    if (t < 0 || t >= c.n_vocab) return invalid_argument("token id " + std::to_string(t) + " out of range");
  }

  const int64_t E = c.n_embd, HD = c.head_dim, QD = int64_t{c.n_head} * HD, KD = int64_t{c.n_head_kv} * HD;
  Scratch& S = *scratch_;
  if (T > S.cap_tokens) {
    S.cap_tokens = T;
    S.x.resize(T * E);
    S.h.resize(T * E);
    S.q.resize(T * QD);
    S.k.resize(T * KD);
    S.v.resize(T * KD);
    S.attn.resize(T * QD);
    S.ffn_a.resize(T * c.n_ff);
    S.ffn_b.resize(T * c.n_ff);
    S.rope_cos.resize(T * HD / 2);
    S.rope_sin.resize(T * HD / 2);
    S.positions.resize(T);
  }
  if (static_cast<int64_t>(S.logit_in.size()) < num_logits * E) S.logit_in.resize(num_logits * E);

  const Weights& w = *weights_;
  {
    int64_t t = 0;
    for (const SeqSlice& s : batch.seqs) {
      for (int32_t j = 0; j < s.num_tokens; ++j, ++t) S.positions[t] = s.start_pos + j;
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    w.token_embd.dequantize_row(batch.tokens[t], S.x.data() + t * E);
    rope_angles(c, w.rope_freq_factors, S.positions[t], S.rope_cos.data() + t * HD / 2,
                S.rope_sin.data() + t * HD / 2);
  }

  AttentionParams ap{.n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim,
                     .scale = 1.0f / std::sqrt(static_cast<float>(HD))};
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const auto& L = w.layers[l];
    for (int64_t t = 0; t < T; ++t) rms_norm(S.x.data() + t * E, L.attn_norm.data(), S.h.data() + t * E, E, c.rms_eps);
    L.wq.matmul(S.h.data(), T, S.q.data(), pool);
    L.wk.matmul(S.h.data(), T, S.k.data(), pool);
    L.wv.matmul(S.h.data(), T, S.v.data(), pool);
    for (int64_t t = 0; t < T; ++t) {
      if (!L.bq.empty()) {
        for (int64_t i = 0; i < QD; ++i) S.q[t * QD + i] += L.bq[i];
        for (int64_t i = 0; i < KD; ++i) S.k[t * KD + i] += L.bk[i];
        for (int64_t i = 0; i < KD; ++i) S.v[t * KD + i] += L.bv[i];
      }
      const float* cs = S.rope_cos.data() + t * HD / 2;
      const float* sn = S.rope_sin.data() + t * HD / 2;
      apply_rope(S.q.data() + t * QD, c.n_head, c.head_dim, c.rope_neox, cs, sn);
      apply_rope(S.k.data() + t * KD, c.n_head_kv, c.head_dim, c.rope_neox, cs, sn);
    }
    write_kv(kv, l, batch.seqs, S.k.data(), S.v.data());
    paged_attention(kv, l, ap, batch.seqs, S.q.data(), S.attn.data(), S.attn_scratch, pool);
    L.wo.matmul(S.attn.data(), T, S.h.data(), pool);
    for (int64_t i = 0; i < T * E; ++i) S.x[i] += S.h[i];

    for (int64_t t = 0; t < T; ++t) rms_norm(S.x.data() + t * E, L.ffn_norm.data(), S.h.data() + t * E, E, c.rms_eps);
    L.w_gate.matmul(S.h.data(), T, S.ffn_a.data(), pool);
    L.w_up.matmul(S.h.data(), T, S.ffn_b.data(), pool);
    for (int64_t i = 0; i < T * c.n_ff; ++i) {
      float g = S.ffn_a[i];
      S.ffn_a[i] = g / (1.0f + std::exp(-g)) * S.ffn_b[i];
    }
    L.w_down.matmul(S.ffn_a.data(), T, S.h.data(), pool);
    for (int64_t i = 0; i < T * E; ++i) S.x[i] += S.h[i];
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
  if (num_logits > 0) w.output->matmul(S.logit_in.data(), num_logits, logits, pool);
  return ok_status();
}

}  // namespace ts::model
