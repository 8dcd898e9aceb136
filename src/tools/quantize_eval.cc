#include "tools/quantize_eval.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "tensor/quantizer.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ts::tools {
namespace {

// All-position logits of one model for `tokens`: [n][n_vocab].
Result<std::vector<float>> run_all_positions(model::Model& m, const std::vector<int32_t>& tokens, ThreadPool* pool) {
  const auto& c = m.config();
  constexpr int32_t kBlock = 16;
  const int32_t n = static_cast<int32_t>(tokens.size());
  const int32_t num_blocks = (n + kBlock - 1) / kBlock;
  TS_ASSIGN_OR_RETURN(auto kv, model::KvStorage::create(c, model::KvType::kF32, kBlock, num_blocks));
  std::vector<int32_t> table(static_cast<size_t>(num_blocks));
  for (int32_t i = 0; i < num_blocks; ++i) table[static_cast<size_t>(i)] = i;
  model::SeqSlice s{.num_tokens = n, .start_pos = 0, .block_table = table, .num_logits = n};
  std::vector<float> logits(static_cast<size_t>(n) * static_cast<size_t>(c.n_vocab));
  TS_RETURN_IF_ERROR(m.forward({.tokens = tokens, .seqs = std::span<const model::SeqSlice>(&s, 1)}, kv,
                               logits.data(), pool));
  return logits;
}

void log_softmax(const float* x, int64_t n, std::vector<double>& out) {
  out.resize(static_cast<size_t>(n));
  double mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  const double lse = mx + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = x[i] - lse;
}

}  // namespace

Result<LogitComparison> compare_models(const std::string& ref_path, const std::string& test_path,
                                       const std::vector<int32_t>& tokens, int num_threads) {
  if (tokens.empty()) return invalid_argument("no tokens to compare on");
  TS_ASSIGN_OR_RETURN(auto ref, model::Model::load(ref_path));
  TS_ASSIGN_OR_RETURN(auto test, model::Model::load(test_path));
  const int64_t nv = ref->config().n_vocab;
  if (test->config().n_vocab != nv) return invalid_argument("the two models have different vocabularies");
  for (int32_t t : tokens) {
    if (t < 0 || t >= nv) return invalid_argument("token id " + std::to_string(t) + " out of range");
  }
  std::unique_ptr<ThreadPool> pool = num_threads > 1 ? std::make_unique<ThreadPool>(num_threads) : nullptr;
  TS_ASSIGN_OR_RETURN(auto a, run_all_positions(*ref, tokens, pool.get()));
  TS_ASSIGN_OR_RETURN(auto b, run_all_positions(*test, tokens, pool.get()));
  LogitComparison r;
  r.num_positions = static_cast<int64_t>(tokens.size());
  std::vector<double> la, lb;
  double err2 = 0, ref2 = 0;
  int64_t agree = 0;
  for (int64_t p = 0; p < r.num_positions; ++p) {
    const float* x = a.data() + p * nv;
    const float* y = b.data() + p * nv;
    agree += (std::max_element(x, x + nv) - x) == (std::max_element(y, y + nv) - y);
    log_softmax(x, nv, la);
    log_softmax(y, nv, lb);
    double kl = 0, mean = 0;
    for (int64_t i = 0; i < nv; ++i) {
      kl += std::exp(la[static_cast<size_t>(i)]) * (la[static_cast<size_t>(i)] - lb[static_cast<size_t>(i)]);
      mean += x[i];
    }
    mean /= static_cast<double>(nv);
    for (int64_t i = 0; i < nv; ++i) {
      err2 += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
      ref2 += (x[i] - mean) * (x[i] - mean);
    }
    kl = std::max(kl, 0.0);  // rounding can make a near-zero KL slightly negative
    r.mean_kl += kl;
    r.max_kl = std::max(r.max_kl, kl);
  }
  r.mean_kl /= static_cast<double>(r.num_positions);
  r.top1_agreement = static_cast<double>(agree) / static_cast<double>(r.num_positions);
  r.rel_rms_error = ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
  return r;
}

Status write_decoded_copy(const std::string& in_path, const std::string& out_path) {
  TS_ASSIGN_OR_RETURN(auto in, gguf::GgufFile::open(in_path));
  gguf::GgufWriter w(in->alignment());
  for (const auto& [key, value] : in->metadata()) w.set(key, value);
  for (const auto& t : in->tensors()) {
    if (tensor::type_traits(t.type)->compute) {
      TS_RETURN_IF_ERROR(w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.num_bytes)));
      continue;
    }
    std::vector<float> f(static_cast<size_t>(t.num_elements));
    const int64_t cols = t.cols();
    TS_RETURN_IF_ERROR(tensor::dequantize_rows(t.type, t.data, f.data(), t.num_elements / cols, cols));
    std::vector<uint8_t> bytes(f.size() * sizeof(float));
    std::memcpy(bytes.data(), f.data(), bytes.size());
    TS_RETURN_IF_ERROR(w.add_tensor(t.name, 0, t.shape, std::move(bytes)));
  }
  return w.write(out_path);
}

Result<std::vector<int32_t>> tokenize_with_model(const std::string& model_path, const std::string& text) {
  TS_ASSIGN_OR_RETURN(auto m, model::Model::load(model_path));
  return m->tokenizer().encode(text, true, false);
}

}  // namespace ts::tools
