// Preparing a PreparedActivations' forms for the kernels of one weight layout (the int8 /
// fp16 / interleaved copies of the input that kern::Act points at). Internal to src/tensor:
// Matrix::prepare and Matrix::matmul_rows call it; the forms are documented beside kern::Act.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "tensor/kernels.h"
#include "tensor/matrix.h"

namespace ts::tensor {

// Makes the forms that `layout`'s kernels under `isa` read at p's batch size and that p lacks
// (split over `pool` for large batches), and points `act` at them.
void prepare_activation_forms(PreparedActivations::Impl& p, kern::Layout layout, Isa isa, const kern::KernelTable& kt,
                              ThreadPool* pool, kern::Act* act);

}  // namespace ts::tensor
