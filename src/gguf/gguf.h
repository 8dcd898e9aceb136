// GGUF reader (v1, v2, v3) and writer.
//
// Reader: the file is mmap'ed read-only; tensor data are zero-copy views into the map and stay
// valid as long as the GgufFile lives. Metadata is parsed eagerly into owned values. Every
// length, count, offset and size is checked against the file before use, so a truncated,
// corrupt or hostile file is refused with a precise message (Status kDataLoss/kUnimplemented),
// never a crash or an allocation larger than the file. A GgufFile is immutable after open and
// safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace ts::gguf {

enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
std::string_view value_type_name(ValueType t);

// One metadata value. Scalars keep their declared type; arrays keep their element type and
// store elements in the vector that matches it (ints for every integer type and bool, floats
// for float32/64, strings, or nested values for arrays of arrays).
struct Value {
  ValueType type = ValueType::kUint32;
  ValueType elem_type = ValueType::kUint32;  // arrays only
  int64_t i = 0;                             // integer scalars (uint64 stored bit-cast) and bool
  double f = 0;                              // float scalars
  std::string s;                             // string scalar
  std::vector<int64_t> ints;                 // integer / bool arrays
  std::vector<double> floats;                // float arrays
  std::vector<std::string> strings;          // string arrays
  std::vector<Value> values;                 // arrays of arrays

  bool is_array() const { return type == ValueType::kArray; }
  bool is_integer() const;  // any integer scalar or bool
  bool is_float() const;    // float32/float64 scalar
  size_t array_size() const;

  static Value make_u32(uint32_t v);
  static Value make_i32(int32_t v);
  static Value make_u64(uint64_t v);
  static Value make_f32(float v);
  static Value make_bool(bool v);
  static Value make_string(std::string v);
  static Value make_string_array(std::vector<std::string> v);
  static Value make_f32_array(std::vector<double> v);
  static Value make_i32_array(std::vector<int64_t> v);
};

struct TensorInfo {
  std::string name;
  uint32_t type = 0;              // ggml type id (tensor::DType)
  std::vector<int64_t> shape;     // ggml order: shape[0] is the innermost (row length)
  uint64_t offset = 0;            // from the start of the data section
  const uint8_t* data = nullptr;  // view into the mapping
  uint64_t num_bytes = 0;
  int64_t num_elements = 0;

  int64_t rows() const;           // product of shape[1..]
  int64_t cols() const { return shape.empty() ? 1 : shape[0]; }
};

struct OpenOptions {
  // Refuse tensors of types this build cannot compute with (kUnimplemented). The reader itself
  // only needs the type's size; model loading sets this.
  bool require_compute_types = false;
};

class GgufFile {
 public:
  // Maps and parses `path`. Errors: kNotFound (missing/unreadable), kDataLoss (not GGUF,
  // truncated, corrupt), kUnimplemented (unknown version or tensor type).
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path, OpenOptions opts = {});
  // Parses an in-memory image (copied); used by the fuzzer and tests.
  static Result<std::unique_ptr<GgufFile>> from_bytes(std::span<const uint8_t> bytes,
                                                      OpenOptions opts = {});
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  // Typed getters: nullopt when absent or of an incompatible type.
  std::optional<int64_t> get_int(std::string_view key) const;     // any integer or bool
  std::optional<double> get_float(std::string_view key) const;    // float or integer
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  const std::vector<std::string>* get_string_array(std::string_view key) const;
  const std::vector<double>* get_float_array(std::string_view key) const;
  const std::vector<int64_t>* get_int_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  Status parse(const OpenOptions& opts);

  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  const uint8_t* base_ = nullptr;  // mapping or owned buffer
  uint64_t size_ = 0;
  void* map_ = nullptr;            // non-null when mmap'ed
  std::vector<uint8_t> owned_;     // from_bytes copy
  std::vector<std::pair<std::string, Value>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Writes GGUF v3. Tensor data are copied in at add time (or written from a caller-owned span
// that must stay alive until write()). Not thread-safe.
class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}
  // Replaces an existing key of the same name, keeping its position.
  void set(std::string key, Value value);
  // shape in ggml order (shape[0] innermost). `data` must hold exactly the tensor's bytes.
  Status add_tensor(std::string name, uint32_t type, std::vector<int64_t> shape,
                    std::vector<uint8_t> data);
  // Writes to path (via a temporary file renamed into place).
  Status write(const std::string& path) const;
  // The whole file image in memory (tests, fuzz seeds).
  std::vector<uint8_t> to_bytes() const;

 private:
  struct PendingTensor {
    std::string name;
    uint32_t type;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace ts::gguf
