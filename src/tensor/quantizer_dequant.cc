// Reference dequantizers and the row-level dispatch of quantizer.h.
#include <cmath>
#include <cstddef>
#include <cstring>

#include "tensor/fp16.h"
#include "tensor/quantizer.h"

namespace ts::tensor {

namespace {

inline void scale_min_k4(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

}  // namespace

void dequantize_ref_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + 16] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_ref_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
      y[j + 16] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_ref_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof qh);
    for (int j = 0; j < 16; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
      y[j] = static_cast<float>(((x[i].qs[j] & 0x0F) | h0) - 16) * d;
      y[j + 16] = static_cast<float>(((x[i].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void dequantize_ref_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof qh);
    for (int j = 0; j < 16; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) | h0) * d + m;
      y[j + 16] = static_cast<float>((x[i].qs[j] >> 4) | h1) * d + m;
    }
  }
}

void dequantize_ref_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequantize_ref_q2_k(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d), min = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF), ml = min * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_ref_q3_k(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d_all = fp16_to_fp32(x[i].d);
    int8_t scales[16];
    for (int j = 0; j < 16; ++j) {
      const int lo = j < 8 ? x[i].scales[j] & 0xF : x[i].scales[j - 8] >> 4;
      const int hi = (x[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3;
      scales[j] = static_cast<int8_t>((lo | (hi << 4)) - 32);
    }
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    uint8_t m = 1;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d_all * static_cast<float>(scales[is++]);
          for (int l = 0; l < 16; ++l) {
            const int k = l + 16 * part;
            *y++ = dl * static_cast<float>(((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4));
          }
        }
      }
    }
  }
}

void dequantize_ref_q4_k(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d), min = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int is = 0; is < 8; is += 2, q += 32) {
      uint8_t sc, m;
      scale_min_k4(is, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequantize_ref_q5_k(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d), min = fp16_to_fp32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2, ql += 32) {
      uint8_t sc, m;
      scale_min_k4(is, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void dequantize_ref_q6_k(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void dequantize_ref_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kIq4nlLevelsRef[x[i].qs[j] & 0xF]);
      y[j + 16] = d * static_cast<float>(kIq4nlLevelsRef[x[i].qs[j] >> 4]);
    }
  }
}

void dequantize_ref_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* qs = x[i].qs;
    for (int ib = 0; ib < 8; ++ib, qs += 16, y += 32) {
      const int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((x[i].scales_h >> 2 * ib) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kIq4nlLevelsRef[qs[j] & 0xF]);
        y[j + 16] = dl * static_cast<float>(kIq4nlLevelsRef[qs[j] >> 4]);
      }
    }
  }
}

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
  const int64_t n = nrows * n_per_row;
  switch (static_cast<DType>(type)) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); break;
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
      break;
    }
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
      break;
    }
    case DType::kQ4_0: dequantize_ref_q4_0(static_cast<const BlockQ4_0*>(src), dst, n); break;
    case DType::kQ4_1: dequantize_ref_q4_1(static_cast<const BlockQ4_1*>(src), dst, n); break;
    case DType::kQ5_0: dequantize_ref_q5_0(static_cast<const BlockQ5_0*>(src), dst, n); break;
    case DType::kQ5_1: dequantize_ref_q5_1(static_cast<const BlockQ5_1*>(src), dst, n); break;
    case DType::kQ8_0: dequantize_ref_q8_0(static_cast<const BlockQ8_0*>(src), dst, n); break;
    case DType::kQ2_K: dequantize_ref_q2_k(static_cast<const BlockQ2_K*>(src), dst, n); break;
    case DType::kQ3_K: dequantize_ref_q3_k(static_cast<const BlockQ3_K*>(src), dst, n); break;
    case DType::kQ4_K: dequantize_ref_q4_k(static_cast<const BlockQ4_K*>(src), dst, n); break;
    case DType::kQ5_K: dequantize_ref_q5_k(static_cast<const BlockQ5_K*>(src), dst, n); break;
    case DType::kQ6_K: dequantize_ref_q6_k(static_cast<const BlockQ6_K*>(src), dst, n); break;
    case DType::kIQ4_NL: dequantize_ref_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, n); break;
    case DType::kIQ4_XS: dequantize_ref_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, n); break;
    default: break;
  }
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
