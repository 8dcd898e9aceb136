// The untiled attention the tiled kernels (attention.cc) are tested against: one query at a
// time, each K/V page converted for every query. Its F16 path with p.f16_ggml is the llama.cpp
// flash-attention emulation the golden tests were first matched with; otherwise (F32/Q8_0, and
// F16 with the f32 accumulator, whose scores are llama.cpp's fp16-query dot) an exact two-pass
// softmax (double sum). Kept for tests and as the documentation of the arithmetic.
#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/fp16.h"

namespace ts::model {
namespace {

// Converts `n` head vectors (one page, [n][head_dim]) of the storage type to floats.
__attribute__((always_inline)) inline void load_page(const KvStorage& kv, int32_t layer, bool is_v, int32_t block, int32_t head, int32_t n,
               float* out) {
  const int32_t hd = kv.head_dim(), bs = kv.block_size();
  const uint8_t* src = kv.page_ptr(layer, is_v, block, head);
  // Element (token s, dimension d): V pages are [block_size][head_dim], K pages transposed.
  auto at = [&](int32_t s, int32_t d) { return is_v ? s * hd + d : d * bs + s; };
  switch (kv.type()) {
    case KvType::kF32: {
      const float* f = reinterpret_cast<const float*>(src);
      for (int32_t s = 0; s < n; ++s)
        for (int32_t d = 0; d < hd; ++d) out[s * hd + d] = f[at(s, d)];
      break;
    }
    case KvType::kF16: {
#if defined(__GNUC__) && !defined(__clang__)
      // _Float16 lets the compiler use vcvtph2ps in the x86-64-v3/v4 clones below.
      const _Float16* h = reinterpret_cast<const _Float16*>(src);
      for (int32_t s = 0; s < n; ++s)
        for (int32_t d = 0; d < hd; ++d) out[s * hd + d] = static_cast<float>(h[at(s, d)]);
#else
      const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
      for (int32_t s = 0; s < n; ++s)
        for (int32_t d = 0; d < hd; ++d) out[s * hd + d] = tensor::fp16_to_fp32(h[at(s, d)]);
#endif
      break;
    }
    case KvType::kQ8_0: {
      const int8_t* qv = reinterpret_cast<const int8_t*>(src);
      const float* sc = kv.scale_ptr(layer, is_v, block, head, 0);
      for (int32_t s = 0; s < n; ++s)
        for (int32_t d = 0; d < hd; ++d) out[s * hd + d] = sc[s] * qv[at(s, d)];
      break;
    }
  }
}

// x rounded through fp16 (round to nearest even, as F16C's vcvtps2ph).
__attribute__((always_inline)) inline float rnd16(float x) {
#if defined(__GNUC__) && !defined(__clang__)
  return static_cast<float>(static_cast<_Float16>(x));
#else
  return tensor::round_fp16(x);
#endif
}

// ggml_vec_dot_f16 as built for AVX2 + F16C (the reference hosts of ../shared/golden's second
// set): four 8-lane f32 accumulators fed by fused multiply-adds over 32 values a step, reduced
// (0+2)+(1+3), then the two 128-bit halves, then two horizontal adds; a tail past the last
// multiple of 32 summed in double. With an F16 cache llama.cpp's scores come from this dot, and
// quantized models are sensitive enough to its rounding to flip near-tied greedy ids.
__attribute__((always_inline)) inline float dot_f16_ggml(const float* x, const float* y, int32_t n) {
  float sum[4][8] = {};
  const int32_t np = n & ~31;
  for (int32_t i = 0; i < np; i += 32)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 8; ++l) sum[j][l] = __builtin_fmaf(x[i + 8 * j + l], y[i + 8 * j + l], sum[j][l]);
  float r[8];
  for (int l = 0; l < 8; ++l) r[l] = (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]);
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = r[l] + r[l + 4];
  double acc = (t[0] + t[1]) + (t[2] + t[3]);
  for (int32_t i = np; i < n; ++i) acc += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(acc);
}

// Sixteen independent partial sums so the compiler vectorizes without reassociating.
__attribute__((always_inline)) inline float dot(const float* a, const float* b, int32_t n) {
  float acc[16] = {};
  int32_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * b[i + l];
  float s = 0;
  for (int l = 0; l < 16; ++l) s += acc[l];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The per-(sequence, KV head) work, compiled for x86-64-v4 (AVX-512), v3 (AVX2 + F16C) and
// baseline; the loader picks the best clone for this CPU.
struct AttendCtx {
  const KvStorage& kv;
  int32_t layer;
  const AttentionParams& p;
  std::span<const SeqSlice> seqs;
  const float* q;
  float* out;
  AttentionScratch& scratch;
  const std::vector<int64_t>& first;
  int64_t max_ctx;
};

#if defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void attend_items_ref(const AttendCtx& c, int64_t item_begin, int64_t item_end, int thread) {
  const KvStorage& kv = c.kv;
  const int32_t layer = c.layer;
  const AttentionParams& p = c.p;
  const auto& seqs = c.seqs;
  const float* q = c.q;
  float* out = c.out;
  const auto& first = c.first;
  const int64_t max_ctx = c.max_ctx;
  const int32_t hd = p.head_dim, nkv = p.n_head_kv, group = p.n_head / p.n_head_kv;
  const int32_t bs = kv.block_size();
  const int64_t QD = int64_t{p.n_head} * hd;
  AttentionScratch& scratch = c.scratch;
  float* scores = scratch.per_thread[thread].data();
  float* page = scores + static_cast<size_t>(group) * max_ctx;
  float* acc = page + static_cast<size_t>(bs) * hd;
  for (int64_t item = item_begin; item < item_end; ++item) {
    const size_t si = static_cast<size_t>(item / nkv);
    const int32_t kvh = static_cast<int32_t>(item % nkv);
    const SeqSlice& s = seqs[si];
    // Queries on the f32 tiles (uses_f32_tiles): plain f32 attention of the unrounded query,
    // which the tiles compute up to rounding.
    const bool f32_tiles = uses_f32_tiles(p, kv.type(), s);
    for (int32_t j = 0; j < s.num_tokens; ++j) {
      const int64_t t = first[si] + j;
      const int32_t ctx = s.start_pos + j + 1;  // causal: positions lo..pos
      // Sliding window: only the last `window` positions (the query's own included).
      const int32_t lo = p.window > 0 ? std::max(0, ctx - p.window) : 0;
      const int32_t first_page = lo / bs * bs;
      const float* qt = q + t * QD + int64_t{kvh} * group * hd;
      if (kv.type() == KvType::kF16 && p.f16_ggml && !f32_tiles) {
        // llama.cpp's default context on CPU (flash attention over an F16 cache), reproduced
        // so that greedy ids agree with it even at near ties: the query rounded to fp16,
        // f16·f16 scores summed in f32, an online softmax whose output accumulator is stored
        // in fp16 (rounded after every key: rescale by exp(M_old - M) when the max grows, then
        // acc += v * exp(s - M)), and the f32 sum S applied at the end.
        float* qh = acc + static_cast<size_t>(group) * hd;           // [group][hd]
        float* vpage = qh + static_cast<size_t>(group) * hd;         // [bs][hd]
        float* mrun = vpage + static_cast<size_t>(bs) * hd;          // [group]
        float* srun = mrun + group;                                  // [group]
        for (int32_t i = 0; i < group * hd; ++i) qh[i] = rnd16(qt[i]);
        std::fill(acc, acc + static_cast<size_t>(group) * hd, 0.f);
        for (int32_t g = 0; g < group; ++g) {
          mrun[g] = -INFINITY;
          srun[g] = 0.f;
        }
        for (int32_t b0 = first_page; b0 < ctx; b0 += bs) {
          const int32_t n = std::min(bs, ctx - b0);
          load_page(kv, layer, false, s.block_table[b0 / bs], kvh, n, page);
          load_page(kv, layer, true, s.block_table[b0 / bs], kvh, n, vpage);
          for (int32_t i = std::max(0, lo - b0); i < n; ++i) {
            const float* kk = page + i * hd;
            const float* vv = vpage + i * hd;
            for (int32_t g = 0; g < group; ++g) {
              float* a = acc + g * hd;
              const float sc = dot_f16_ggml(qh + g * hd, kk, hd) * p.scale;
              float ms = 1.f, vs = 1.f;
              if (sc > mrun[g]) {
                const float mold = mrun[g];
                mrun[g] = sc;
                ms = std::exp(mold - sc);
                for (int32_t d = 0; d < hd; ++d) a[d] = rnd16(a[d] * ms);  // ggml_vec_scale_f16
              } else {
                vs = std::exp(sc - mrun[g]);
              }
              // ggml_vec_mad_f16: one fused multiply-add, then the fp16 store.
              for (int32_t d = 0; d < hd; ++d) a[d] = rnd16(__builtin_fmaf(vv[d], vs, a[d]));
              srun[g] = __builtin_fmaf(srun[g], ms, vs);
            }
          }
        }
        for (int32_t g = 0; g < group; ++g) {
          const float inv = srun[g] > 0 ? 1.f / srun[g] : 0.f;
          for (int32_t d = 0; d < hd; ++d) acc[g * hd + d] *= inv;
        }
        std::memcpy(out + t * QD + int64_t{kvh} * group * hd, acc, sizeof(float) * group * hd);
        continue;
      }
      // Scores, page by page (pages wholly before the window are never read). F16 KV (f32
      // accumulator): llama.cpp's scores, the fp16-rounded query in ggml's f16 dot order.
      const bool f16 = kv.type() == KvType::kF16 && !f32_tiles;
      float* qh = acc + static_cast<size_t>(group) * hd;  // [group][hd], F16 only
      if (f16)
        for (int32_t i = 0; i < group * hd; ++i) qh[i] = rnd16(qt[i]);
      for (int32_t b0 = first_page; b0 < ctx; b0 += bs) {
        const int32_t n = std::min(bs, ctx - b0);
        load_page(kv, layer, false, s.block_table[b0 / bs], kvh, n, page);
        for (int32_t g = 0; g < group; ++g)
          for (int32_t i = 0; i < n; ++i)
            scores[g * max_ctx + b0 + i] =
                (f16 ? dot_f16_ggml(qh + g * hd, page + i * hd, hd) : dot(qt + g * hd, page + i * hd, hd)) * p.scale;
      }
      // Softmax per query head over [lo, ctx).
      for (int32_t g = 0; g < group; ++g) {
        float* sc = scores + g * max_ctx;
        float m = sc[lo];
        for (int32_t i = lo + 1; i < ctx; ++i) m = std::max(m, sc[i]);
        double sum = 0;
        for (int32_t i = lo; i < ctx; ++i) {
          sc[i] = std::exp(sc[i] - m);
          sum += sc[i];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int32_t i = lo; i < ctx; ++i) sc[i] *= inv;
        for (int32_t i = first_page; i < lo; ++i) sc[i] = 0.f;  // masked: outside the window
      }
      std::fill(acc, acc + static_cast<size_t>(group) * hd, 0.f);
      for (int32_t b0 = first_page; b0 < ctx; b0 += bs) {
        const int32_t n = std::min(bs, ctx - b0);
        load_page(kv, layer, true, s.block_table[b0 / bs], kvh, n, page);
        for (int32_t g = 0; g < group; ++g) {
          float* a = acc + g * hd;
          const float* sc = scores + g * max_ctx + b0;
          for (int32_t i = 0; i < n; ++i) {
            const float wgt = sc[i];
            const float* vv = page + i * hd;
            for (int32_t d = 0; d < hd; ++d) a[d] += wgt * vv[d];
          }
        }
      }
      std::memcpy(out + t * QD + int64_t{kvh} * group * hd, acc, sizeof(float) * group * hd);
    }
  }
}

}  // namespace

void paged_attention_reference(const KvStorage& kv, int32_t layer, const AttentionParams& p,
                     std::span<const SeqSlice> seqs, const float* q, float* out,
                     AttentionScratch& scratch, ThreadPool* pool) {
  const int32_t hd = p.head_dim, nkv = p.n_head_kv, group = p.n_head / p.n_head_kv;
  const int32_t bs = kv.block_size();
  // First token index of each sequence, and the longest context in the batch.
  int64_t max_ctx = 0;
  std::vector<int64_t>& first = scratch.first;
  if (first.size() < seqs.size()) first.resize(seqs.size());
  {
    int64_t t = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      first[i] = t;
      t += seqs[i].num_tokens;
      max_ctx = std::max<int64_t>(max_ctx, seqs[i].start_pos + seqs[i].num_tokens);
    }
  }
  const int nt = pool ? pool->num_threads() : 1;
  // Per thread: scores [group][max_ctx], one K/V page [bs][hd], accumulators [group][hd].
  // The F16 path (see attend_items_ref) adds rounded queries [group][hd], a V page [bs][hd] and the
  // running max and sum per query head.
  const size_t need = static_cast<size_t>(group) * max_ctx + static_cast<size_t>(bs) * hd +
                      static_cast<size_t>(group) * hd +
                      (kv.type() == KvType::kF16 ? static_cast<size_t>(group) * hd + static_cast<size_t>(bs) * hd + 2 * group : 0);
  if (static_cast<int>(scratch.per_thread.size()) < nt) scratch.per_thread.resize(nt);
  for (auto& buf : scratch.per_thread)
    if (buf.size() < need) buf.resize(need);

  const int64_t num_items = static_cast<int64_t>(seqs.size()) * nkv;
  AttendCtx ctx{kv, layer, p, seqs, q, out, scratch, first, max_ctx};
  auto work = [&](int64_t b, int64_t e, int thread) { attend_items_ref(ctx, b, e, thread); };
  if (!pool || nt == 1 || num_items == 1) {
    work(0, num_items, 0);
    return;
  }
  pool->run([&](int i, int n) {
    int64_t per = num_items / n, rem = num_items % n;
    int64_t b = i * per + std::min<int64_t>(i, rem);
    int64_t e = b + per + (i < rem ? 1 : 0);
    if (b < e) work(b, e, i);
  });
}

}  // namespace ts::model
