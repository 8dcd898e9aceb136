// Several matmuls over one input in a single pool job (PERFORMANCE.md "Threading": one job, not
// one per op). At decode sizes a matmul of a 135M-class model streams only ~0.2-1 MB of weights,
// so publishing a job, waking the workers and joining them is a visible part of its time; Q/K/V
// (and gate/up, whose SiLU*up epilogue runs per row chunk as soon as both halves are made) then
// cost one job instead of three (two plus an element-wise pass).
//
// Results are bit-identical to calling Matrix::matmul on each part: every output row is made by
// the same kernel over the same prepared activations, only the split of rows over chunks and
// threads differs (and Matrix::matmul already splits rows dynamically).
//
// Thread-safety: like Matrix::matmul (the pool's run() must not be re-entered).
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "tensor/matrix.h"

namespace ts::model {

// One product: y[t][r] = sum_k W[r][k] * x[t][k], y of stride m->rows().
struct MatmulPart {
  const tensor::Matrix* m = nullptr;
  float* y = nullptr;
};

// Every part multiplied by x (x.cols() == each part's cols()), in one pool job. Falls back to
// one Matrix::matmul per part for batches of kMaxFusedTokens tokens or more (prefill), where
// each matmul is long enough that the job overhead does not matter and the matmul's own
// parallel activation preparation and token panels apply.
void fused_matmuls(std::span<const MatmulPart> parts, tensor::PreparedActivations& x, ThreadPool* pool);

// gate = x * Wg^T and up = x * Wu^T (both [T][F]), then a[t][r] = act(gate) * up into `a`
// ([T][F]), `b` ([T][F]) holding up. act: SiLU (silu == true) or ggml's GELU-tanh table. One
// pool job for small batches; a plain sequence of matmuls plus the element-wise pass otherwise.
void fused_gate_up(const tensor::Matrix& gate, const tensor::Matrix& up, tensor::PreparedActivations& x, bool silu,
                   float* a, float* b, ThreadPool* pool);

// Below this many tokens the fused single-job paths are used.
inline constexpr int64_t kMaxFusedTokens = 16;

}  // namespace ts::model
