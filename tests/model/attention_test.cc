// Tiled attention (attention.cc) against its scalar reference kernels and against the untiled
// reference (attention_reference.cc), on every ISA tier this host can run.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "model/attention.h"
#include "model/attention_kernels.h"
#include "model/model.h"
#include "attention_test_util.h"
#include "model_test_util.h"
#include "tensor/fp16.h"
#include "tensor/matrix.h"
#include "test_util.h"

namespace ts::model {
namespace {

using attn::kKeyTile;
using attn_test::randv;
using attn_test::same_bits;
using attn_test::Batch;
using attn_test::Case;
using attn_test::host_isas;
using attn_test::IsaScope;
using attn_test::make_batch;
using attn_test::rel_err;

const std::vector<Case>& cases() {
  static const std::vector<Case> v = {
      // head_dim 64 / 128, GQA ratios 1 / 2 / 7, 1..17 queries, chunk and block boundaries.
      {.n_head = 14, .n_head_kv = 2, .head_dim = 64, .block_size = 16, .window = 0, .seqs = {{0, 17}, {5, 1}, {31, 2}}},
      {.n_head = 4, .n_head_kv = 4, .head_dim = 128, .block_size = 4, .window = 0, .seqs = {{0, 1}, {15, 16}, {16, 3}}},
      {.n_head = 8, .n_head_kv = 4, .head_dim = 64, .block_size = 32, .window = 0, .seqs = {{40, 33}, {0, 9}}},
      {.n_head = 7, .n_head_kv = 1, .head_dim = 128, .block_size = 16, .window = 0, .seqs = {{47, 1}, {0, 40}}},
      // Sliding window shorter than a tile and across tiles; an odd head_dim (80, tail in double).
      {.n_head = 4, .n_head_kv = 2, .head_dim = 64, .block_size = 8, .window = 5, .seqs = {{0, 23}, {30, 1}}},
      {.n_head = 2, .n_head_kv = 1, .head_dim = 80, .block_size = 16, .window = 20, .seqs = {{10, 37}}},
  };
  return v;
}


class TiledAttention : public ::testing::TestWithParam<tensor::Isa> {};

TEST_P(TiledAttention, MatchesUntiledReference) {
  IsaScope scope(GetParam());
  ThreadPool pool(2);
  for (size_t ci = 0; ci < cases().size(); ++ci) {
    const Case& c = cases()[ci];
    // F16 with both V accumulators (ggml's fp16 one: bit-exact emulation; f32: the default).
    for (auto [type, ggml] : {std::pair{KvType::kF16, true}, std::pair{KvType::kF16, false},
                              std::pair{KvType::kF32, false}, std::pair{KvType::kQ8_0, false}}) {
      Batch b = make_batch(c, type, static_cast<uint32_t>(100 + ci));
      b.p.f16_ggml = ggml;
      const size_t n = b.q.size();
      std::vector<float> want(n), got(n), got1(n);
      AttentionScratch s1, s2, s3;
      paged_attention_reference(b.kv, 1, b.p, b.slices, b.q.data(), want.data(), s1, &pool);
      paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), got.data(), s2, &pool);
      paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), got1.data(), s3, nullptr);
      const std::string what = "case " + std::to_string(ci) + " " + kv_type_name(type) + (ggml ? " ggml" : "");
      if (ggml) {
        // The llama.cpp emulation is per query: tiling must not change a single bit.
        for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(want[i], got[i])) << what << " at " << i;
      } else {
        // Online vs two-pass softmax: rounding-level differences only.
        EXPECT_LT(rel_err(got, want), 2e-5) << what;
      }
      // Thread count never changes the result.
      for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(got[i], got1[i])) << what << " threads at " << i;
    }
  }
}

TEST_P(TiledAttention, SameBitsOnEveryIsa) {
  // Reference run on the scalar tier; the tier under test must reproduce it exactly.
  const Case& c = cases()[0];
  for (auto [type, ggml] : {std::pair{KvType::kF16, true}, std::pair{KvType::kF16, false}, std::pair{KvType::kQ8_0, false}}) {
    Batch b = make_batch(c, type, 5);
    b.p.f16_ggml = ggml;
    std::vector<float> scalar(b.q.size()), got(b.q.size());
    AttentionScratch s;
    {
      IsaScope sc(tensor::Isa::kScalar);
      paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), scalar.data(), s, nullptr);
    }
    IsaScope scope(GetParam());
    paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), got.data(), s, nullptr);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same_bits(scalar[i], got[i])) << kv_type_name(type) << " " << i;
  }
}

TEST(TiledAttention, LongContextSplitsKeysIntoChunks) {
  // Contexts past kKvChunk: keys split into chunks whose partials are merged. Queries whose
  // context fits in the first chunk stay bit-exact (F16) even inside a straddling tile; the
  // others agree with the single-pass reference to rounding; threads change nothing.
  const Case c{.n_head = 4, .n_head_kv = 1, .head_dim = 64, .block_size = 16, .window = 0,
               .seqs = {{kKvChunk - 24, 40}, {2 * kKvChunk + 50, 1}}};
  ThreadPool pool(2);
  for (auto [type, ggml] : {std::pair{KvType::kF16, true}, std::pair{KvType::kF16, false}, std::pair{KvType::kQ8_0, false}}) {
    Batch b = make_batch(c, type, 21);
    b.p.f16_ggml = ggml;
    const size_t n = b.q.size();
    std::vector<float> want(n), got(n), got1(n);
    AttentionScratch s1, s2, s3;
    paged_attention_reference(b.kv, 1, b.p, b.slices, b.q.data(), want.data(), s1, &pool);
    paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), got.data(), s2, &pool);
    paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), got1.data(), s3, nullptr);
    const size_t row = static_cast<size_t>(c.n_head) * c.head_dim;
    for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(got[i], got1[i])) << kv_type_name(type) << " threads " << i;
    // F16: both sides round an fp16 accumulator after every key (2^-11 relative each), over
    // ~2000 keys in one pass vs two chunks; measured 2.7e-3 of the largest output.
    EXPECT_LT(rel_err(got, want), ggml ? 1e-2 : 2e-5) << kv_type_name(type);
    if (ggml) {
      // Tokens 0..23 of the first sequence have context <= kKvChunk.
      for (size_t i = 0; i < 24 * row; ++i) ASSERT_TRUE(same_bits(got[i], want[i])) << "in-chunk query at " << i;
      // And the split is real: some later query differs in the last bits from one pass.
      bool differs = false;
      for (size_t i = 24 * row; i < n; ++i) differs |= !same_bits(got[i], want[i]);
      EXPECT_TRUE(differs);
    }
  }
}

TEST(TiledAttention, F16AccumulatorsDifferOnlyByRounding) {
  // The same F16 cache through both V accumulators: different bits (the fp16 one rounds after
  // every key), the same values to fp16 rounding.
  const Case& c = cases()[0];
  Batch b = make_batch(c, KvType::kF16, 31);
  std::vector<float> f32acc(b.q.size()), f16acc(b.q.size());
  AttentionScratch s;
  b.p.f16_ggml = false;
  paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), f32acc.data(), s, nullptr);
  b.p.f16_ggml = true;
  paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), f16acc.data(), s, nullptr);
  size_t differ = 0;
  for (size_t i = 0; i < f32acc.size(); ++i) differ += !same_bits(f32acc[i], f16acc[i]);
  EXPECT_GT(differ, f32acc.size() / 4);
  EXPECT_LT(rel_err(f32acc, f16acc), 1e-2);
}

TEST(TiledAttention, Q8KvCloseToF32Kv) {
  // 8-bit KV (one scale per token per head) stays within quantization error of f32 KV.
  const Case& c = cases()[0];
  Batch a = make_batch(c, KvType::kF32, 9), b = make_batch(c, KvType::kQ8_0, 9);
  std::vector<float> oa(a.q.size()), ob(b.q.size());
  AttentionScratch s;
  paged_attention(a.kv, 1, a.p, a.slices, a.q.data(), oa.data(), s, nullptr);
  paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), ob.data(), s, nullptr);
  const double e = rel_err(ob, oa);
  EXPECT_LT(e, 0.05);
  EXPECT_GT(e, 0.0);  // it really is quantized
}

// stories260K end to end (head_dim 8: the packed narrow-head kernels) on every ISA tier:
// with F32 KV the greedy ids are llama.cpp's reference ids, and F16 KV (the engine default,
// the fp16-accumulator path) gives the same ids on every tier.
TEST(NarrowHeads, Stories260KGreedyOnEveryIsa) {
  TS_REQUIRE_SHARED(path, "models/stories260K/stories260K-f32.gguf");
  TS_REQUIRE_SHARED(ref, "models/stories260K/expected/greedy_once_upon_a_time_n64.ids");
  const auto expect = testing::read_ids(ref);
  constexpr int kPrompt = 5;
  ASSERT_GT(static_cast<int>(expect.size()), kPrompt);
  const std::vector<int32_t> prompt(expect.begin(), expect.begin() + kPrompt), want(expect.begin() + kPrompt, expect.end());
  std::vector<int32_t> first_f16;
  ThreadPool pool(2);
  for (tensor::Isa isa : host_isas()) {
    IsaScope scope(isa);
    auto m = Model::load(path);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ASSERT_EQ((*m)->config().head_dim, 8);
    testing::SoloRunner f32(**m, KvType::kF32, 32);
    EXPECT_EQ(f32.greedy(prompt, static_cast<int>(want.size()), &pool), want) << tensor::isa_name(isa);
    testing::SoloRunner f16(**m, KvType::kF16, 32);
    const auto got = f16.greedy(prompt, static_cast<int>(want.size()), &pool);
    if (first_f16.empty()) {
      first_f16 = got;
    } else {
      EXPECT_EQ(got, first_f16) << tensor::isa_name(isa);
    }
  }
}

// Decode steps (one token per sequence) of 1-9 sequences: the items span KV heads, split by
// query heads when there are too few, and their composition follows the thread count; the
// F16 path must still give the untiled reference's bits and every thread count the same bits.
TEST_P(TiledAttention, DecodeItemsAnyThreadCountSameBits) {
  IsaScope scope(GetParam());
  ThreadPool pool2(2), pool3(3), pool4(4);
  struct Shape {
    int32_t n_head, n_head_kv, head_dim, window;
  };
  const Shape shapes[] = {{9, 3, 64, 0}, {14, 2, 64, 0}, {4, 4, 32, 0}, {8, 2, 64, 40}};
  uint32_t seed = 300;
  for (const Shape& sh : shapes) {
    for (int32_t nseq : {1, 2, 3, 4, 5, 8, 9}) {
      Case c{.n_head = sh.n_head, .n_head_kv = sh.n_head_kv, .head_dim = sh.head_dim, .block_size = 16,
             .window = sh.window, .seqs = {}};
      for (int32_t i = 0; i < nseq; ++i) c.seqs.push_back({(37 * i + 11 * nseq) % 150 + i, 1});
      for (auto [type, ggml] : {std::pair{KvType::kF16, true}, std::pair{KvType::kF16, false}, std::pair{KvType::kQ8_0, false}}) {
        Batch b = make_batch(c, type, seed++);
        b.p.f16_ggml = ggml;
        const size_t n = b.q.size();
        std::vector<float> want(n), ref(n);
        AttentionScratch s0, s1;
        paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), want.data(), s0, nullptr);
        paged_attention_reference(b.kv, 1, b.p, b.slices, b.q.data(), ref.data(), s1, &pool2);
        const std::string what = std::to_string(sh.n_head) + "/" + std::to_string(sh.n_head_kv) + " seqs " +
                                 std::to_string(nseq) + " " + kv_type_name(type);
        if (b.p.f16_ggml) {
          for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(want[i], ref[i])) << what << " vs reference at " << i;
        } else {
          EXPECT_LT(rel_err(want, ref), 2e-5) << what;
        }
        for (ThreadPool* pool : {&pool2, &pool3, &pool4}) {
          std::vector<float> got(n, -1.f);
          AttentionScratch s;
          paged_attention(b.kv, 1, b.p, b.slices, b.q.data(), got.data(), s, pool);
          for (size_t i = 0; i < n; ++i)
            ASSERT_TRUE(same_bits(want[i], got[i])) << what << " " << pool->num_threads() << " threads at " << i;
        }
      }
    }
  }
}

// The prologue (bias/RoPE/KV store in the model) must run exactly once per (sequence, KV head)
// and before anything reads that head's queries or new K/V, whether paged_attention runs it
// inside the decode items or first. Here the queries start as garbage and the new tokens' K/V
// slots hold garbage: the prologue copies the real queries of its heads in and stores the real
// K/V. Any item that attended before its prologue would read garbage; the result must equal
// attention over the real inputs bit for bit, on every thread count, run after run.
TEST_P(TiledAttention, PrologueRunsOnceBeforeItsHeadsAttend) {
  IsaScope scope(GetParam());
  ThreadPool pool2(2), pool3(3), pool4(4);
  struct Scenario {
    Case c;
    const char* what;
  };
  std::vector<Scenario> scenarios;
  for (int32_t nseq : {1, 2, 3, 5, 8}) {
    Case smol{.n_head = 9, .n_head_kv = 3, .head_dim = 64, .block_size = 16, .window = 0, .seqs = {}};
    Case qwen{.n_head = 14, .n_head_kv = 2, .head_dim = 64, .block_size = 16, .window = 0, .seqs = {}};
    for (int32_t i = 0; i < nseq; ++i) {
      smol.seqs.push_back({20 + 13 * i, 1});
      qwen.seqs.push_back({70 - 7 * i, 1});
    }
    scenarios.push_back({smol, "smollm2 decode"});
    scenarios.push_back({qwen, "qwen decode"});
  }
  // Not fusable: a prompt chunk beside decode tokens, and a context past one key chunk.
  scenarios.push_back({{.n_head = 9, .n_head_kv = 3, .head_dim = 64, .block_size = 16, .window = 0,
                        .seqs = {{30, 1}, {0, 21}, {5, 1}}}, "mixed"});
  scenarios.push_back({{.n_head = 4, .n_head_kv = 2, .head_dim = 32, .block_size = 16, .window = 0,
                        .seqs = {{kKvChunk + 40, 1}, {9, 1}, {12, 1}}}, "long"});
  // Prompts only: the prologue units run per (sequence, KV head) in the items' pool job; KV
  // head 0's is slowed down ("prefill slow0"), so items of that head taken meanwhile must wait.
  scenarios.push_back({{.n_head = 9, .n_head_kv = 3, .head_dim = 64, .block_size = 16, .window = 0,
                        .seqs = {{0, 40}}}, "prefill"});
  scenarios.push_back({{.n_head = 9, .n_head_kv = 3, .head_dim = 64, .block_size = 16, .window = 0,
                        .seqs = {{0, 40}}}, "prefill slow0"});
  scenarios.push_back({{.n_head = 14, .n_head_kv = 2, .head_dim = 64, .block_size = 16, .window = 0,
                        .seqs = {{0, 33}, {10, 17}}}, "prefill slow0 2 seqs"});
  uint32_t seed = 700;
  for (const Scenario& sc : scenarios) {
    for (KvType type : {KvType::kF16, KvType::kF32, KvType::kQ8_0}) {
      const Case& c = sc.c;
      // Real new K/V for each step token, written through write_kv for the expected result.
      std::mt19937 rng(seed + 1);
      const int64_t KD = int64_t{c.n_head_kv} * c.head_dim, QD = int64_t{c.n_head} * c.head_dim;
      Batch want_b = make_batch(c, type, seed), got_b = make_batch(c, type, seed);
      ++seed;
      auto knew = randv(static_cast<size_t>(want_b.T * KD), rng), vnew = randv(static_cast<size_t>(want_b.T * KD), rng);
      write_kv(want_b.kv, 1, want_b.slices, knew.data(), vnew.data());
      std::vector<float> want(want_b.q.size());
      AttentionScratch s0;
      paged_attention(want_b.kv, 1, want_b.p, want_b.slices, want_b.q.data(), want.data(), s0, nullptr);
      std::vector<int64_t> first;
      for (int64_t t = 0; const SeqSlice& s : got_b.slices) {
        first.push_back(t);
        t += s.num_tokens;
      }
      const int32_t g = c.n_head / c.n_head_kv;
      const bool slow0 = std::string(sc.what).find("slow0") != std::string::npos;
      AttentionScratch s;  // reused: each call's readiness stamps must not leak into the next
      for (int rep = 0; rep < 6; ++rep) {
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3, &pool4}) {
          const std::vector<float> garbage(static_cast<size_t>(got_b.T * KD), 1000.f);
          write_kv(got_b.kv, 1, got_b.slices, garbage.data(), garbage.data());
          std::vector<float> q(got_b.q.size(), std::numeric_limits<float>::quiet_NaN());
          std::vector<std::atomic<int>> calls(c.seqs.size() * c.n_head_kv);
          struct Ctx {
            Batch* b;
            const std::vector<float>* real_q;
            std::vector<float>* q;
            const std::vector<float>*knew, *vnew;
            const std::vector<int64_t>* first;
            std::vector<std::atomic<int>>* calls;
            int64_t KD, QD;
            int32_t g, hd, nkv;
            bool slow0;
          } ctx{&got_b, &got_b.q, &q, &knew, &vnew, &first, &calls, KD, QD, g, c.head_dim, c.n_head_kv, slow0};
          const AttentionPrologue pro{
              .fn = [](void* p, int32_t si, int32_t kb, int32_t ke) {
                Ctx& x = *static_cast<Ctx*>(p);
                if (x.slow0 && kb == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
                const SeqSlice& s = x.b->slices[static_cast<size_t>(si)];
                const int64_t t0 = (*x.first)[static_cast<size_t>(si)];
                for (int64_t t = t0; t < t0 + s.num_tokens; ++t) {
                  const int64_t q0 = t * x.QD + int64_t{kb} * x.g * x.hd, q1 = t * x.QD + int64_t{ke} * x.g * x.hd;
                  std::copy(x.real_q->begin() + q0, x.real_q->begin() + q1, x.q->begin() + q0);
                }
                write_kv(x.b->kv, 1, std::span<const SeqSlice>(&s, 1), x.knew->data() + t0 * x.KD, x.vnew->data() + t0 * x.KD, kb, ke);
                for (int32_t h = kb; h < ke; ++h) (*x.calls)[static_cast<size_t>(si) * x.nkv + h].fetch_add(1);
              },
              .ctx = &ctx};
          std::vector<float> got(q.size(), -1.f);
          paged_attention(got_b.kv, 1, got_b.p, got_b.slices, q.data(), got.data(), s, pool, &pro);
          const std::string what = std::string(sc.what) + " seqs " + std::to_string(c.seqs.size()) + " " +
                                   kv_type_name(type) + " threads " + std::to_string(pool ? pool->num_threads() : 1);
          for (size_t i = 0; i < calls.size(); ++i) ASSERT_EQ(calls[i].load(), 1) << what << " (seq, kv head) " << i;
          for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same_bits(want[i], got[i])) << what << " at " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, TiledAttention, ::testing::ValuesIn(host_isas()),
                         [](const ::testing::TestParamInfo<tensor::Isa>& i) { return std::string(tensor::isa_name(i.param)); });

}  // namespace
}  // namespace ts::model
