// GGUF reader: every read is bounds-checked against the mapped image (see gguf.h).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <limits>

#include "gguf/gguf.h"
#include "tensor/dtype.h"

namespace ts::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 4;
constexpr int kMaxDims = 4;

// Cursor over the file image; every read checks the remaining length.
class Cursor {
 public:
  Cursor(const uint8_t* p, uint64_t n, uint32_t version) : p_(p), n_(n), version_(version) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return n_ - pos_; }

  template <typename T>
  Status read(T* out, const char* what) {
    if (remaining() < sizeof(T)) return truncated(what);
    std::memcpy(out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return ok_status();
  }
  // A count or length: uint32 in v1, uint64 in v2+.
  Status read_len(uint64_t* out, const char* what) {
    if (version_ == 1) {
      uint32_t v = 0;
      TS_RETURN_IF_ERROR(read(&v, what));
      *out = v;
      return ok_status();
    }
    return read(out, what);
  }
  Status read_string(std::string* out, const char* what) {
    uint64_t len = 0;
    TS_RETURN_IF_ERROR(read_len(&len, what));
    if (len > remaining()) {
      return data_loss(std::string(what) + ": string length " + std::to_string(len) +
                       " at offset " + std::to_string(pos_) + " runs past the end of the file");
    }
    out->assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return ok_status();
  }
  Status truncated(const char* what) const {
    return data_loss(std::string("file truncated while reading ") + what + " at offset " +
                     std::to_string(pos_));
  }
  uint32_t version() const { return version_; }

 private:
  const uint8_t* p_;
  uint64_t n_ = 0;
  uint64_t pos_ = 0;
  uint32_t version_ = 0;
};

// Smallest number of bytes one element of `t` takes in the file (for count sanity checks).
uint64_t min_elem_bytes(ValueType t, uint32_t version) {
  switch (t) {
    case ValueType::kUint8: case ValueType::kInt8: case ValueType::kBool: return 1;
    case ValueType::kUint16: case ValueType::kInt16: return 2;
    case ValueType::kUint32: case ValueType::kInt32: case ValueType::kFloat32: return 4;
    case ValueType::kUint64: case ValueType::kInt64: case ValueType::kFloat64: return 8;
    case ValueType::kString: return version == 1 ? 4 : 8;
    case ValueType::kArray: return version == 1 ? 8 : 12;
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::kFloat64); }

Status read_scalar(Cursor& c, ValueType t, Value* v, const std::string& key) {
  v->type = t;
  const char* w = "metadata value";
  switch (t) {
    case ValueType::kUint8: { uint8_t x = 0; TS_RETURN_IF_ERROR(c.read(&x, w)); v->i = x; break; }
    case ValueType::kInt8: { int8_t x = 0; TS_RETURN_IF_ERROR(c.read(&x, w)); v->i = x; break; }
    case ValueType::kUint16: { uint16_t x = 0; TS_RETURN_IF_ERROR(c.read(&x, w)); v->i = x; break; }
    case ValueType::kInt16: { int16_t x = 0; TS_RETURN_IF_ERROR(c.read(&x, w)); v->i = x; break; }
    case ValueType::kUint32: { uint32_t x = 0; TS_RETURN_IF_ERROR(c.read(&x, w)); v->i = x; break; }
    case ValueType::kInt32: { int32_t x = 0; TS_RETURN_IF_ERROR(c.read(&x, w)); v->i = x; break; }
    case ValueType::kUint64: { uint64_t x = 0; TS_RETURN_IF_ERROR(c.read(&x, w)); v->i = static_cast<int64_t>(x); break; }
    case ValueType::kInt64: { int64_t x = 0; TS_RETURN_IF_ERROR(c.read(&x, w)); v->i = x; break; }
    case ValueType::kFloat32: { float x = 0; TS_RETURN_IF_ERROR(c.read(&x, w)); v->f = x; break; }
    case ValueType::kFloat64: { double x = 0; TS_RETURN_IF_ERROR(c.read(&x, w)); v->f = x; break; }
    case ValueType::kBool: {
      uint8_t x = 0;
      TS_RETURN_IF_ERROR(c.read(&x, w));
      if (x > 1) return data_loss("metadata '" + key + "': bool value " + std::to_string(x) + " is not 0 or 1");
      v->i = x;
      break;
    }
    case ValueType::kString: TS_RETURN_IF_ERROR(c.read_string(&v->s, w)); break;
    case ValueType::kArray: return internal_error("read_scalar on array");
  }
  return ok_status();
}

Status read_value(Cursor& c, ValueType t, Value* v, const std::string& key, int depth) {
  if (t != ValueType::kArray) return read_scalar(c, t, v, key);
  if (depth >= kMaxArrayDepth) return data_loss("metadata '" + key + "': arrays nested too deeply");
  v->type = ValueType::kArray;
  uint32_t et = 0;
  TS_RETURN_IF_ERROR(c.read(&et, "array element type"));
  if (!valid_type(et)) {
    return data_loss("metadata '" + key + "': unknown array element type " + std::to_string(et));
  }
  v->elem_type = static_cast<ValueType>(et);
  uint64_t n = 0;
  TS_RETURN_IF_ERROR(c.read_len(&n, "array length"));
  if (n > c.remaining() / min_elem_bytes(v->elem_type, c.version())) {
    return data_loss("metadata '" + key + "': array of " + std::to_string(n) +
                     " elements cannot fit in the remaining " + std::to_string(c.remaining()) +
                     " bytes");
  }
  Value e;
  switch (v->elem_type) {
    case ValueType::kString:
      v->strings.resize(n);
      for (uint64_t k = 0; k < n; ++k) TS_RETURN_IF_ERROR(c.read_string(&v->strings[k], "array string"));
      break;
    case ValueType::kFloat32:
    case ValueType::kFloat64:
      v->floats.reserve(n);
      for (uint64_t k = 0; k < n; ++k) {
        TS_RETURN_IF_ERROR(read_scalar(c, v->elem_type, &e, key));
        v->floats.push_back(e.f);
      }
      break;
    case ValueType::kArray:
      v->values.resize(n);
      for (uint64_t k = 0; k < n; ++k) TS_RETURN_IF_ERROR(read_value(c, ValueType::kArray, &v->values[k], key, depth + 1));
      break;
    default:
      v->ints.reserve(n);
      for (uint64_t k = 0; k < n; ++k) {
        TS_RETURN_IF_ERROR(read_scalar(c, v->elem_type, &e, key));
        v->ints.push_back(e.i);
      }
  }
  return ok_status();
}

}  // namespace

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kUint8: return "u8";
    case ValueType::kInt8: return "i8";
    case ValueType::kUint16: return "u16";
    case ValueType::kInt16: return "i16";
    case ValueType::kUint32: return "u32";
    case ValueType::kInt32: return "i32";
    case ValueType::kFloat32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "str";
    case ValueType::kArray: return "arr";
    case ValueType::kUint64: return "u64";
    case ValueType::kInt64: return "i64";
    case ValueType::kFloat64: return "f64";
  }
  return "?";
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::kUint8: case ValueType::kInt8: case ValueType::kUint16: case ValueType::kInt16:
    case ValueType::kUint32: case ValueType::kInt32: case ValueType::kUint64: case ValueType::kInt64:
    case ValueType::kBool:
      return true;
    default:
      return false;
  }
}
bool Value::is_float() const { return type == ValueType::kFloat32 || type == ValueType::kFloat64; }
size_t Value::array_size() const {
  if (!is_array()) return 0;
  return ints.size() + floats.size() + strings.size() + values.size();
}

int64_t TensorInfo::rows() const {
  int64_t r = 1;
  for (size_t i = 1; i < shape.size(); ++i) r *= shape[i];
  return r;
}

GgufFile::~GgufFile() {
  if (map_) munmap(map_, size_);
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path, OpenOptions opts) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return not_found("'" + path + "' is not a regular file");
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ == 0) {
    ::close(fd);
    return data_loss("'" + path + "' is empty, not a GGUF file");
  }
  void* m = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) return not_found("cannot map '" + path + "': " + std::strerror(errno));
  f->map_ = m;
  f->base_ = static_cast<const uint8_t*>(m);
  Status s = f->parse(opts);
  if (!s.ok()) return Status(s.code(), "'" + path + "': " + s.message());
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::from_bytes(std::span<const uint8_t> bytes, OpenOptions opts) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->owned_.assign(bytes.begin(), bytes.end());
  f->base_ = f->owned_.data();
  f->size_ = f->owned_.size();
  TS_RETURN_IF_ERROR(f->parse(opts));
  return f;
}

Status GgufFile::parse(const OpenOptions& opts) {
  if (size_ < 8) return data_loss("file of " + std::to_string(size_) + " bytes is too small to be GGUF");
  uint32_t magic = 0;
  std::memcpy(&magic, base_, 4);
  if (magic != kMagic) return data_loss("not a GGUF file (bad magic)");
  std::memcpy(&version_, base_ + 4, 4);
  if (version_ < 1 || version_ > 3) {
    return unimplemented("unsupported GGUF version " + std::to_string(version_) + " (1, 2 and 3 are read)");
  }
  Cursor c(base_, size_, version_);
  uint32_t skip = 0;
  TS_RETURN_IF_ERROR(c.read(&skip, "magic"));
  TS_RETURN_IF_ERROR(c.read(&skip, "version"));
  uint64_t n_tensors, n_kv = 0;
  TS_RETURN_IF_ERROR(c.read_len(&n_tensors, "tensor count"));
  TS_RETURN_IF_ERROR(c.read_len(&n_kv, "metadata count"));
  // Each kv needs at least a key length, a type and a 1-byte value; each tensor info at least
  // a name length, n_dims, one dim, type and offset.
  uint64_t len_bytes = version_ == 1 ? 4 : 8;
  if (n_kv > c.remaining() / (len_bytes + 5)) {
    return data_loss("metadata count " + std::to_string(n_kv) + " is impossible for a file of this size");
  }
  if (n_tensors > c.remaining() / (len_bytes + 4 + len_bytes + 4 + 8)) {
    return data_loss("tensor count " + std::to_string(n_tensors) + " is impossible for a file of this size");
  }

  kv_.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    TS_RETURN_IF_ERROR(c.read_string(&key, "metadata key"));
    uint32_t t = 0;
    TS_RETURN_IF_ERROR(c.read(&t, "metadata type"));
    if (!valid_type(t)) return data_loss("metadata '" + key + "': unknown value type " + std::to_string(t));
    Value v;
    TS_RETURN_IF_ERROR(read_value(c, static_cast<ValueType>(t), &v, key, 0));
    if (kv_index_.count(key)) return data_loss("duplicate metadata key '" + key + "'");
    kv_index_[key] = kv_.size();
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const Value* a = find("general.alignment")) {
    if (!a->is_integer() || a->i <= 0 || (a->i & (a->i - 1)) != 0 || a->i > (1 << 24)) {
      return data_loss("general.alignment must be a positive power of two");
    }
    alignment_ = static_cast<uint64_t>(a->i);
  }

  tensors_.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    TensorInfo ti;
    TS_RETURN_IF_ERROR(c.read_string(&ti.name, "tensor name"));
    uint32_t n_dims = 0;
    TS_RETURN_IF_ERROR(c.read(&n_dims, "tensor dimension count"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return data_loss("tensor '" + ti.name + "': " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
    }
    ti.num_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      TS_RETURN_IF_ERROR(c.read_len(&dim, "tensor dimension"));
      if (dim == 0 || dim > (uint64_t{1} << 40)) {
        return data_loss("tensor '" + ti.name + "': dimension " + std::to_string(d) + " is " + std::to_string(dim));
      }
      if (static_cast<uint64_t>(ti.num_elements) > (uint64_t{1} << 50) / dim) {
        return data_loss("tensor '" + ti.name + "': element count overflows");
      }
      ti.shape.push_back(static_cast<int64_t>(dim));
      ti.num_elements *= static_cast<int64_t>(dim);
    }
    TS_RETURN_IF_ERROR(c.read(&ti.type, "tensor type"));
    TS_RETURN_IF_ERROR(c.read(&ti.offset, "tensor offset"));
    auto traits = tensor::type_traits(ti.type);
    if (!traits) {
      return unimplemented("tensor '" + ti.name + "' has unknown type " + std::to_string(ti.type));
    }
    if (opts.require_compute_types && !traits->compute) {
      return unimplemented("tensor '" + ti.name + "' has type " + std::string(traits->name) +
                           ", which this build cannot compute with (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                           "q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs)");
    }
    if (ti.shape[0] % traits->block_size != 0) {
      return data_loss("tensor '" + ti.name + "': row length " + std::to_string(ti.shape[0]) +
                       " is not a multiple of the " + std::string(traits->name) + " block size " +
                       std::to_string(traits->block_size));
    }
    ti.num_bytes = static_cast<uint64_t>(ti.num_elements / traits->block_size) * traits->type_size;
    if (ti.offset % alignment_ != 0) {
      return data_loss("tensor '" + ti.name + "': offset " + std::to_string(ti.offset) +
                       " is not aligned to " + std::to_string(alignment_));
    }
    if (tensor_index_.count(ti.name)) return data_loss("duplicate tensor name '" + ti.name + "'");
    tensor_index_[ti.name] = tensors_.size();
    tensors_.push_back(std::move(ti));
  }

  uint64_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (n_tensors > 0 && data_start > size_) {
    return data_loss("tensor data section starts at " + std::to_string(data_start) + ", past the end of the file");
  }
  uint64_t data_size = data_start <= size_ ? size_ - data_start : 0;
  for (TensorInfo& ti : tensors_) {
    if (ti.offset > data_size || ti.num_bytes > data_size - ti.offset) {
      return data_loss("tensor '" + ti.name + "': data [" + std::to_string(ti.offset) + ", +" +
                       std::to_string(ti.num_bytes) + ") lies outside the file's data section of " +
                       std::to_string(data_size) + " bytes (truncated file?)");
    }
    ti.data = base_ + data_start + ti.offset;
  }
  return ok_status();
}

const Value* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v || !v->is_integer()) return std::nullopt;
  return v->i;
}
std::optional<double> GgufFile::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->is_integer()) return static_cast<double>(v->i);
  return std::nullopt;
}
std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v || !v->is_integer()) return std::nullopt;
  return v->i != 0;
}
std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::kString) return std::nullopt;
  return v->s;
}
const std::vector<std::string>* GgufFile::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v || !v->is_array() || v->elem_type != ValueType::kString) return nullptr;
  return &v->strings;
}
const std::vector<double>* GgufFile::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v || !v->is_array() || (v->elem_type != ValueType::kFloat32 && v->elem_type != ValueType::kFloat64)) return nullptr;
  return &v->floats;
}
const std::vector<int64_t>* GgufFile::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v || !v->is_array()) return nullptr;
  if (v->elem_type == ValueType::kString || v->elem_type == ValueType::kArray ||
      v->elem_type == ValueType::kFloat32 || v->elem_type == ValueType::kFloat64) {
    return nullptr;
  }
  return &v->ints;
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace ts::gguf
