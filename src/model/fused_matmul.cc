#include "model/fused_matmul.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "core/check.h"
#include "model/ops.h"

namespace ts::model {

namespace {

using tensor::Matrix;
using tensor::PreparedActivations;

constexpr int64_t kGroup = 16;  // rows per chunk unit: the R16 interleave (harmless for plain layouts)
// Below this many multiply-adds in all the parts together everything runs on the calling thread
// (Matrix::matmul's own threshold is the same order: a job costs ~1-3 us).
constexpr int64_t kMinParallelWork = int64_t{1} << 16;

int64_t groups_of(const Matrix& m) { return (m.rows() + kGroup - 1) / kGroup; }

// Rows [r0, r1) of m into y (stride m.rows()) for n_tok tokens, single-threaded. With one token
// the kernel writes straight into y; otherwise through a per-thread [n_tok][r1 - r0] buffer.
void rows_into(const Matrix& m, PreparedActivations& x, float* y, int64_t r0, int64_t r1) {
  const int64_t T = x.n_tok(), n = r1 - r0, R = m.rows();
  if (T == 1) {
    m.matmul_rows(x, y + r0, r0, r1, nullptr);
    return;
  }
  thread_local std::vector<float> tmp;
  if (static_cast<int64_t>(tmp.size()) < T * n) tmp.resize(static_cast<size_t>(T * n));
  m.matmul_rows(x, tmp.data(), r0, r1, nullptr);
  for (int64_t t = 0; t < T; ++t) std::memcpy(y + t * R + r0, tmp.data() + t * n, sizeof(float) * n);
}

// Runs body(part, g0, g1) over every group of every part in chunks claimed by the pool's
// threads. The caller prepares every activation form the parts need first (Matrix::prepare):
// PreparedActivations is single-user while it prepares; once all forms exist, concurrent
// matmuls only read it. (Before, group 0 of every part ran on the calling thread to make the
// forms, the other thread idle meanwhile: ~1.5-3 us of every decode Q/K/V and gate/up job.)
// Decode-sized batches (n_tok <= kDecodeChunkTokens) give each thread one equal contiguous
// chunk of 7/8 of the groups first, so each thread reads one sequential weight stream (as
// Matrix::matmul does for them), then the last 1/8 in small chunks claimed by whichever thread
// is done first: a thread that streams slower (or started late) no longer holds the other at
// the join for the whole difference. Larger batches keep ~4 chunks per thread.
constexpr int64_t kDecodeChunkTokens = 8;

struct ChunkPlan {
  int64_t big = 0, nbig = 0, tail_grain = 1, total = 0;
  int64_t count() const { return nbig + (total - nbig * big + tail_grain - 1) / tail_grain; }
  std::pair<int64_t, int64_t> range(int64_t i) const {
    if (i < nbig) return {i * big, (i + 1) * big};
    const int64_t b = nbig * big + (i - nbig) * tail_grain;
    return {b, std::min(total, b + tail_grain)};
  }
};

ChunkPlan plan_chunks(int64_t total, int64_t n_tok, int64_t threads) {
  ChunkPlan c{.total = total};
  if (n_tok <= kDecodeChunkTokens) {
    c.nbig = threads;
    c.big = (total - total / 8) / threads;
    c.tail_grain = std::max<int64_t>(1, (total - c.nbig * c.big) / (2 * threads));
  } else {
    c.tail_grain = std::max<int64_t>(1, total / (4 * threads));
  }
  if (c.big == 0) c.nbig = 0;
  return c;
}

template <typename Body>
void over_groups(std::span<const int64_t> groups, int64_t n_tok, ThreadPool* pool, Body&& body) {
  const int64_t num_parts = static_cast<int64_t>(groups.size());
  int64_t total = 0;
  for (int64_t g : groups) total += g;
  const ChunkPlan plan = plan_chunks(total, n_tok, pool->num_threads());
  pool->parallel_chunks(plan.count(), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      // Map chunk i of the concatenated groups back to (part, groups).
      auto [c0, c1] = plan.range(i);
      int64_t base = 0;
      for (int64_t p = 0; p < num_parts && c0 < c1; ++p) {
        const int64_t len = groups[static_cast<size_t>(p)];
        const int64_t lo = std::max(c0, base), hi = std::min(c1, base + len);
        if (lo < hi) {
          body(p, lo - base, hi - base);
          c0 = hi;
        }
        base += len;
      }
    }
  });
}

}  // namespace

void fused_matmuls(std::span<const MatmulPart> parts, PreparedActivations& x, ThreadPool* pool) {
  const int64_t T = x.n_tok();
  int64_t work = 0;
  for (const MatmulPart& p : parts) work += p.m->rows() * p.m->cols() * T;
  if (T >= kMaxFusedTokens) {
    for (const MatmulPart& p : parts) p.m->matmul(x, p.y, pool);
    return;
  }
  if (pool == nullptr || pool->num_threads() == 1 || work < kMinParallelWork) {
    for (const MatmulPart& p : parts) p.m->matmul(x, p.y, nullptr);
    return;
  }
  TS_CHECK(parts.size() <= 8, "fused_matmuls: at most 8 parts");
  int64_t groups[8];
  for (size_t i = 0; i < parts.size(); ++i) {
    const Matrix& m = *parts[i].m;
    m.prepare(x, pool);  // every form any part needs (cheap for forms already made)
    groups[i] = groups_of(m);
  }
  over_groups(std::span<const int64_t>(groups, parts.size()), T, pool, [&](int64_t p, int64_t g0, int64_t g1) {
    const Matrix& m = *parts[static_cast<size_t>(p)].m;
    rows_into(m, x, parts[static_cast<size_t>(p)].y, g0 * kGroup, std::min(g1 * kGroup, m.rows()));
  });
}

void fused_gate_up(const Matrix& gate, const Matrix& up, PreparedActivations& x, bool silu, float* a, float* b,
                   ThreadPool* pool) {
  TS_CHECK(gate.rows() == up.rows() && gate.cols() == up.cols(), "fused_gate_up: gate and up shapes differ");
  const int64_t T = x.n_tok(), F = gate.rows();
  auto act = [silu](float* ga, const float* ub, int64_t n) {
    if (silu) {
      swiglu(ga, ub, n);
    } else {
      geglu_ggml(ga, ub, n);
    }
  };
  const int64_t work = 2 * F * gate.cols() * T;
  if (T >= kMaxFusedTokens || pool == nullptr || pool->num_threads() == 1 || work < kMinParallelWork) {
    ThreadPool* p = T >= kMaxFusedTokens ? pool : nullptr;
    gate.matmul(x, a, p);
    up.matmul(x, b, p);
    if (p != nullptr) {
      if (silu) {
        swiglu(a, b, T * F, p);
      } else {
        geglu_ggml(a, b, T * F, p);
      }
    } else {
      act(a, b, T * F);
    }
    return;
  }
  // Rows [r0, r1) of both halves, then their activation, on this thread.
  auto rows = [&](int64_t r0, int64_t r1) {
    rows_into(gate, x, a, r0, r1);
    rows_into(up, x, b, r0, r1);
    for (int64_t t = 0; t < T; ++t) act(a + t * F + r0, b + t * F + r0, r1 - r0);
  };
  gate.prepare(x, pool);
  up.prepare(x, pool);
  const int64_t groups[1] = {groups_of(gate)};
  over_groups(std::span<const int64_t>(groups, 1), T, pool,
              [&](int64_t, int64_t g0, int64_t g1) { rows(g0 * kGroup, std::min(g1 * kGroup, F)); });
}

}  // namespace ts::model
