// The row-level dispatch of quantizer.h (quantize_rows / dequantize_rows) and row validation.
#include <cmath>
#include <cstddef>
#include <cstring>

#include "tensor/fp16.h"
#include "tensor/matrix.h"
#include "tensor/quantizer.h"

namespace ts::tensor {
namespace {

bool in_supported_set(uint32_t type) {
  switch (static_cast<DType>(type)) {
    case DType::kF32: case DType::kF16: case DType::kBF16:
    case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kQ8_0:
    case DType::kQ2_K: case DType::kQ3_K: case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
    case DType::kIQ4_NL: case DType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

Status check_shape(const char* what, uint32_t type, int64_t nrows, int64_t n_per_row) {
  if (!in_supported_set(type)) {
    return unimplemented(std::string("cannot ") + what + " type " + type_name(type));
  }
  auto t = type_traits(type);
  if (nrows < 0 || n_per_row <= 0 || n_per_row % t->block_size) {
    return invalid_argument("row length " + std::to_string(n_per_row) + " is not a positive multiple of " +
                            std::to_string(t->block_size) + " (block size of " + std::string(t->name) + ")");
  }
  return ok_status();
}

}  // namespace

bool can_quantize_to(uint32_t type) { return in_supported_set(type); }
bool can_dequantize_from(uint32_t type) { return in_supported_set(type); }

Status quantize_rows(uint32_t type, const float* src, void* dst, int64_t nrows, int64_t n_per_row) {
  TS_RETURN_IF_ERROR(check_shape("quantize to", type, nrows, n_per_row));
  const int64_t n = nrows * n_per_row;
  switch (static_cast<DType>(type)) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); break;
    case DType::kF16: {
      auto* o = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = fp32_to_fp16(src[i]);
      break;
    }
    case DType::kBF16: {
      auto* o = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = fp32_to_bf16(src[i]);
      break;
    }
    case DType::kQ4_0: quantize_ref_q4_0(src, static_cast<BlockQ4_0*>(dst), n); break;
    case DType::kQ4_1: quantize_ref_q4_1(src, static_cast<BlockQ4_1*>(dst), n); break;
    case DType::kQ5_0: quantize_ref_q5_0(src, static_cast<BlockQ5_0*>(dst), n); break;
    case DType::kQ5_1: quantize_ref_q5_1(src, static_cast<BlockQ5_1*>(dst), n); break;
    case DType::kQ8_0: quantize_ref_q8_0(src, static_cast<BlockQ8_0*>(dst), n); break;
    case DType::kQ2_K: quantize_ref_q2_k(src, static_cast<BlockQ2_K*>(dst), n); break;
    case DType::kQ3_K: quantize_ref_q3_k(src, static_cast<BlockQ3_K*>(dst), n); break;
    case DType::kQ4_K: quantize_ref_q4_k(src, static_cast<BlockQ4_K*>(dst), n); break;
    case DType::kQ5_K: quantize_ref_q5_k(src, static_cast<BlockQ5_K*>(dst), n); break;
    case DType::kQ6_K: quantize_ref_q6_k(src, static_cast<BlockQ6_K*>(dst), n); break;
    case DType::kIQ4_NL: quantize_ref_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n); break;
    case DType::kIQ4_XS: quantize_ref_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), n); break;
    default: break;  // excluded by check_shape
  }
  return ok_status();
}

Status dequantize_rows(uint32_t type, const void* src, float* dst, int64_t nrows, int64_t n_per_row) {
  TS_RETURN_IF_ERROR(check_shape("dequantize", type, nrows, n_per_row));
  // The same decoders the model computes with (tensor/matrix.h): one reference per format.
  dequantize_row(static_cast<DType>(type), src, dst, nrows * n_per_row);
  return ok_status();
}

int64_t first_invalid_row(uint32_t type, const void* data, int64_t nrows, int64_t n_per_row) {
  auto t = type_traits(type);
  if (!t || !in_supported_set(type) || n_per_row % t->block_size) return nrows > 0 ? 0 : -1;
  // Byte offsets of the fp16 fields of one block (ggml's layouts, see dtype.h).
  int offsets[2] = {-1, -1};
  switch (static_cast<DType>(type)) {
    case DType::kQ4_0: case DType::kQ5_0: case DType::kQ8_0: case DType::kIQ4_NL: case DType::kIQ4_XS:
      offsets[0] = 0;
      break;
    case DType::kQ4_1: case DType::kQ5_1: case DType::kQ4_K: case DType::kQ5_K:
      offsets[0] = 0;
      offsets[1] = 2;
      break;
    case DType::kQ2_K: offsets[0] = offsetof(BlockQ2_K, d); offsets[1] = offsetof(BlockQ2_K, dmin); break;
    case DType::kQ3_K: offsets[0] = offsetof(BlockQ3_K, d); break;
    case DType::kQ6_K: offsets[0] = offsetof(BlockQ6_K, d); break;
    default: break;
  }
  const auto* bytes = static_cast<const uint8_t*>(data);
  const int64_t per_row = n_per_row / t->block_size;
  for (int64_t r = 0; r < nrows; ++r) {
    for (int64_t b = 0; b < per_row; ++b) {
      const uint8_t* blk = bytes + (r * per_row + b) * static_cast<int64_t>(t->type_size);
      bool ok = true;
      if (type == static_cast<uint32_t>(DType::kF32)) {
        float v;
        std::memcpy(&v, blk, 4);
        ok = std::isfinite(v);
      } else if (type == static_cast<uint32_t>(DType::kF16) || type == static_cast<uint32_t>(DType::kBF16)) {
        uint16_t h;
        std::memcpy(&h, blk, 2);
        ok = std::isfinite(type == static_cast<uint32_t>(DType::kF16) ? fp16_to_fp32(h) : bf16_to_fp32(h));
      } else {
        for (int o : offsets) {
          if (o < 0) continue;
          uint16_t h;
          std::memcpy(&h, blk + o, 2);
          ok = ok && std::isfinite(fp16_to_fp32(h));
        }
      }
      if (!ok) return r;
    }
  }
  return -1;
}

}  // namespace ts::tensor
