// The quantize driver: plan (quantize_rules.cc), convert tensor by tensor on a thread pool,
// write through GgufWriter (temporary file + rename).
#include "tools/quantize.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "tensor/quantizer.h"

namespace ts::tools {
namespace {

// Converts one tensor (all its rows, experts included) from its type to `to`. Rows are handed
// out in chunks of ~16K weights (as llama-quantize does); each chunk dequantizes its rows into a
// per-thread scratch row block, checks them and quantizes them straight into `out`. Large
// tensors go in up to 16 slices, with on_slice(share done) called on this thread after each.
Status convert_tensor(const gguf::TensorInfo& t, uint32_t to, ThreadPool& pool, std::vector<uint8_t>& out,
                      const std::function<void(double)>& on_slice) {
  if (!tensor::can_dequantize_from(t.type)) {
    return unimplemented("tensor '" + t.name + "' has type " + tensor::type_name(t.type) +
                         ", which quantize cannot read; pick a preset that keeps it or convert it elsewhere");
  }
  const int64_t cols = t.cols();
  const int64_t rows = cols > 0 ? t.num_elements / cols : 0;
  auto from_traits = tensor::type_traits(t.type);
  auto to_traits = tensor::type_traits(to);
  const size_t in_row = tensor::row_bytes(*from_traits, cols);
  const size_t out_row = tensor::row_bytes(*to_traits, cols);
  out.assign(static_cast<size_t>(rows) * out_row, 0);
  const int64_t grain = std::max<int64_t>(1, (32 * 512) / std::max<int64_t>(cols, 1));
  std::atomic<int64_t> bad_row{-1};
  std::atomic<bool> failed{false};
  std::string error;  // written once, by the thread that sets `failed`
  auto convert_rows = [&](int64_t r0, int64_t r1) {
    if (failed.load(std::memory_order_relaxed)) return;
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>((r1 - r0) * cols));
    Status s = tensor::dequantize_rows(t.type, t.data + r0 * in_row, scratch.data(), r1 - r0, cols);
    if (s.ok()) {
      for (size_t i = 0; i < scratch.size(); ++i) {
        if (!std::isfinite(scratch[i])) {
          int64_t expected = -1;
          bad_row.compare_exchange_strong(expected, r0 + static_cast<int64_t>(i) / cols);
          return;
        }
      }
      s = tensor::quantize_rows(to, scratch.data(), out.data() + r0 * out_row, r1 - r0, cols);
    }
    if (s.ok()) {
      if (int64_t r = tensor::first_invalid_row(to, out.data() + r0 * out_row, r1 - r0, cols); r >= 0) {
        s = invalid_argument("row " + std::to_string(r0 + r) + " has weights too large for " +
                             tensor::type_name(to) + " (its fp16 scales overflow)");
      }
    }
    if (!s.ok() && !failed.exchange(true)) error = s.message();
  };
  const int64_t slice = std::max<int64_t>(grain * 4 * pool.num_threads(), (rows + 15) / 16);
  for (int64_t s0 = 0; s0 < rows && !failed.load() && bad_row.load() < 0; s0 += slice) {
    const int64_t s1 = std::min(rows, s0 + slice);
    pool.parallel_chunks(s1 - s0, grain, [&](int64_t a, int64_t b) { convert_rows(s0 + a, s0 + b); });
    if (on_slice) on_slice(static_cast<double>(s1) / static_cast<double>(rows));
  }
  if (failed.load()) return invalid_argument("tensor '" + t.name + "': " + error);
  if (bad_row.load() >= 0) {
    return invalid_argument("tensor '" + t.name + "' has a non-finite weight (NaN or Inf) in row " +
                            std::to_string(bad_row.load()));
  }
  return ok_status();
}

}  // namespace

Result<QuantizeSummary> quantize_file(const std::string& in_path, const std::string& out_path,
                                      const QuantPreset& preset, const QuantizeOptions& options) {
  TS_ASSIGN_OR_RETURN(auto in, gguf::GgufFile::open(in_path));
  QuantizeSummary summary;
  TS_ASSIGN_OR_RETURN(summary.tensors, plan_quantization(*in, preset, options.plan));

  gguf::GgufWriter w(in->alignment());
  for (const auto& [key, value] : in->metadata()) {
    if (key == "split.no" || key == "split.count" || key == "split.tensors.count") continue;
    w.set(key, value);
  }
  w.set("general.quantization_version", gguf::Value::make_u32(2));
  w.set("general.file_type", gguf::Value::make_u32(preset.ftype));

  ThreadPool pool(options.num_threads);
  uint64_t total_in = 0;
  for (const auto& t : in->tensors()) total_in += t.num_bytes;
  uint64_t done_in = 0;
  int64_t index = 0;
  const int64_t num_tensors = static_cast<int64_t>(summary.tensors.size());
  for (const TensorPlan& p : summary.tensors) {
    const gguf::TensorInfo* t = in->find_tensor(p.name);
    std::vector<uint8_t> data;
    if (p.to_type == p.from_type) {
      data.assign(t->data, t->data + t->num_bytes);
    } else {
      auto on_slice = [&](double share) {
        if (options.progress && share < 1) {
          options.progress(index, num_tensors, done_in + static_cast<uint64_t>(share * static_cast<double>(t->num_bytes)),
                           total_in, p.name);
        }
      };
      TS_RETURN_IF_ERROR(convert_tensor(*t, p.to_type, pool, data, on_slice));
      if (tensor::type_traits(p.from_type)->block_size > 1) ++summary.num_requantized;
    }
    summary.num_fallbacks += p.fallback ? 1 : 0;
    summary.input_bytes += t->num_bytes;
    summary.output_bytes += data.size();
    summary.num_elements += t->num_elements;
    TS_RETURN_IF_ERROR(w.add_tensor(p.name, p.to_type, p.shape, std::move(data)));
    done_in += t->num_bytes;
    ++index;
    if (options.progress) options.progress(index, num_tensors, done_in, total_in, p.name);
  }
  TS_RETURN_IF_ERROR(w.write(out_path));
  return summary;
}

}  // namespace ts::tools
