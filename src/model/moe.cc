#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "model/ops.h"

namespace ts::model {

void route_top_k(const float* router_logits, int64_t n_tok, int32_t n_expert, int32_t k, bool norm_weights,
                 int32_t* ids, float* weights) {
  // Per-thread buffers: no allocation once they have grown to n_expert.
  thread_local std::vector<float> probs;
  thread_local std::vector<int32_t> order;
  probs.resize(n_expert);
  order.resize(n_expert);
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* l = router_logits + t * n_expert;
    const float m = *std::max_element(l, l + n_expert);
    double sum = 0;
    for (int32_t e = 0; e < n_expert; ++e) {
      probs[e] = std::exp(l[e] - m);
      sum += probs[e];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int32_t e = 0; e < n_expert; ++e) probs[e] *= inv;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return probs[a] != probs[b] ? probs[a] > probs[b] : a < b;
    });
    double wsum = 0;
    for (int32_t j = 0; j < k; ++j) {
      ids[t * k + j] = order[j];
      weights[t * k + j] = probs[order[j]];
      wsum += probs[order[j]];
    }
    if (norm_weights) {
      const float d = std::max(static_cast<float>(wsum), 6.103515625e-5f);
      for (int32_t j = 0; j < k; ++j) weights[t * k + j] /= d;
    }
  }
}

void moe_ffn(const MoeWeights& w, const MoeParams& p, const float* x, int64_t n_tok, float* out,
             MoeScratch& s, ThreadPool* pool) {
  const int32_t n_expert = static_cast<int32_t>(w.gate.size());
  const int32_t k = p.n_expert_used;
  const int64_t E = p.n_embd, F = p.n_ff_exp;
  auto grow = [](auto& v, size_t n) { if (v.size() < n) v.resize(n); };
  grow(s.logits, static_cast<size_t>(n_tok) * n_expert);
  grow(s.ids, static_cast<size_t>(n_tok) * k);
  grow(s.weights, static_cast<size_t>(n_tok) * k);
  grow(s.slots, static_cast<size_t>(n_tok) * k * E);  // [n_tok][k][E] weighted expert outputs
  w.router.matmul(x, n_tok, s.logits.data(), pool);
  route_top_k(s.logits.data(), n_tok, n_expert, k, p.norm_weights, s.ids.data(), s.weights.data());

  for (int32_t e = 0; e < n_expert; ++e) {
    // The (token, slot) pairs routed to expert e, in token order.
    s.tok.clear();
    s.slot.clear();
    for (int64_t t = 0; t < n_tok; ++t)
      for (int32_t j = 0; j < k; ++j)
        if (s.ids[t * k + j] == e) {
          s.tok.push_back(static_cast<int32_t>(t));
          s.slot.push_back(j);
        }
    const int64_t n = static_cast<int64_t>(s.tok.size());
    if (n == 0) continue;
    grow(s.xe, n * E);
    grow(s.ge, n * F);
    grow(s.ue, n * F);
    grow(s.de, n * E);
    for (int64_t i = 0; i < n; ++i) std::memcpy(s.xe.data() + i * E, x + int64_t{s.tok[i]} * E, sizeof(float) * E);
    s.xe_prep.reset(s.xe.data(), n, E);
    w.gate[e].matmul(s.xe_prep, s.ge.data(), pool);
    w.up[e].matmul(s.xe_prep, s.ue.data(), pool);
    if (p.act == FfnAct::kGeluTanh) {
      geglu_ggml(s.ge.data(), s.ue.data(), n * F);
    } else {
      swiglu(s.ge.data(), s.ue.data(), n * F);
    }
    w.down[e].matmul(s.ge.data(), n, s.de.data(), pool);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = s.tok[i], j = s.slot[i];
      const float wt = s.weights[t * k + j];
      float* dst = s.slots.data() + (t * k + j) * E;
      const float* src = s.de.data() + i * E;
      for (int64_t c = 0; c < E; ++c) dst[c] = src[c] * wt;
    }
  }
  for (int64_t t = 0; t < n_tok; ++t) {
    float* o = out + t * E;
    const float* sl = s.slots.data() + t * k * E;
    std::memcpy(o, sl, sizeof(float) * E);
    for (int32_t j = 1; j < k; ++j)
      for (int64_t c = 0; c < E; ++c) o[c] += sl[j * E + c];
  }
}

}  // namespace ts::model
