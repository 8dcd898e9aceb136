// GGUF v3 writer.
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "gguf/gguf.h"
#include "tensor/dtype.h"

namespace ts::gguf {
namespace {

class Out {
 public:
  explicit Out(std::vector<uint8_t>* buf) : buf_(buf) {}
  template <typename T>
  void put(T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    buf_->insert(buf_->end(), b, b + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    buf_->insert(buf_->end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    while (buf_->size() % alignment) buf_->push_back(0);
  }

 private:
  std::vector<uint8_t>* buf_;
};

void put_scalar(Out& o, ValueType t, int64_t i, double f, const std::string& s) {
  switch (t) {
    case ValueType::kUint8: o.put<uint8_t>(static_cast<uint8_t>(i)); break;
    case ValueType::kInt8: o.put<int8_t>(static_cast<int8_t>(i)); break;
    case ValueType::kUint16: o.put<uint16_t>(static_cast<uint16_t>(i)); break;
    case ValueType::kInt16: o.put<int16_t>(static_cast<int16_t>(i)); break;
    case ValueType::kUint32: o.put<uint32_t>(static_cast<uint32_t>(i)); break;
    case ValueType::kInt32: o.put<int32_t>(static_cast<int32_t>(i)); break;
    case ValueType::kUint64: o.put<uint64_t>(static_cast<uint64_t>(i)); break;
    case ValueType::kInt64: o.put<int64_t>(i); break;
    case ValueType::kFloat32: o.put<float>(static_cast<float>(f)); break;
    case ValueType::kFloat64: o.put<double>(f); break;
    case ValueType::kBool: o.put<uint8_t>(i ? 1 : 0); break;
    case ValueType::kString: o.put_string(s); break;
    case ValueType::kArray: break;
  }
}

void put_value(Out& o, const Value& v) {
  if (!v.is_array()) {
    put_scalar(o, v.type, v.i, v.f, v.s);
    return;
  }
  o.put<uint32_t>(static_cast<uint32_t>(v.elem_type));
  o.put<uint64_t>(v.array_size());
  static const std::string kEmpty;
  switch (v.elem_type) {
    case ValueType::kString:
      for (const auto& s : v.strings) o.put_string(s);
      break;
    case ValueType::kFloat32:
    case ValueType::kFloat64:
      for (double f : v.floats) put_scalar(o, v.elem_type, 0, f, kEmpty);
      break;
    case ValueType::kArray:
      for (const auto& e : v.values) {
        o.put<uint32_t>(static_cast<uint32_t>(ValueType::kArray));
        put_value(o, e);
      }
      break;
    default:
      for (int64_t i : v.ints) put_scalar(o, v.elem_type, i, 0, kEmpty);
  }
}

}  // namespace

Value Value::make_u32(uint32_t v) { Value x; x.type = ValueType::kUint32; x.i = v; return x; }
Value Value::make_i32(int32_t v) { Value x; x.type = ValueType::kInt32; x.i = v; return x; }
Value Value::make_u64(uint64_t v) { Value x; x.type = ValueType::kUint64; x.i = static_cast<int64_t>(v); return x; }
Value Value::make_f32(float v) { Value x; x.type = ValueType::kFloat32; x.f = v; return x; }
Value Value::make_bool(bool v) { Value x; x.type = ValueType::kBool; x.i = v; return x; }
Value Value::make_string(std::string v) { Value x; x.type = ValueType::kString; x.s = std::move(v); return x; }
Value Value::make_string_array(std::vector<std::string> v) {
  Value x; x.type = ValueType::kArray; x.elem_type = ValueType::kString; x.strings = std::move(v); return x;
}
Value Value::make_f32_array(std::vector<double> v) {
  Value x; x.type = ValueType::kArray; x.elem_type = ValueType::kFloat32; x.floats = std::move(v); return x;
}
Value Value::make_i32_array(std::vector<int64_t> v) {
  Value x; x.type = ValueType::kArray; x.elem_type = ValueType::kInt32; x.ints = std::move(v); return x;
}

void GgufWriter::set(std::string key, Value value) {
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(value));
}

Status GgufWriter::add_tensor(std::string name, uint32_t type, std::vector<int64_t> shape,
                              std::vector<uint8_t> data) {
  auto traits = tensor::type_traits(type);
  if (!traits) return invalid_argument("tensor '" + name + "': unknown type " + std::to_string(type));
  if (shape.empty() || shape.size() > 4) return invalid_argument("tensor '" + name + "': 1 to 4 dimensions");
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) return invalid_argument("tensor '" + name + "': non-positive dimension");
    n *= d;
  }
  if (shape[0] % traits->block_size) {
    return invalid_argument("tensor '" + name + "': row length " + std::to_string(shape[0]) +
                            " is not a multiple of the block size of " + std::string(traits->name));
  }
  size_t bytes = static_cast<size_t>(n / traits->block_size) * traits->type_size;
  if (data.size() != bytes) {
    return invalid_argument("tensor '" + name + "': " + std::to_string(data.size()) +
                            " bytes given, " + std::to_string(bytes) + " expected");
  }
  for (const auto& t : tensors_) {
    if (t.name == name) return invalid_argument("duplicate tensor '" + name + "'");
  }
  tensors_.push_back({std::move(name), type, std::move(shape), std::move(data)});
  return ok_status();
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> buf;
  Out o(&buf);
  o.put<uint32_t>(0x46554747);
  o.put<uint32_t>(3);
  o.put<uint64_t>(tensors_.size());
  bool has_alignment = false;
  for (const auto& kv : kv_) has_alignment |= kv.first == "general.alignment";
  o.put<uint64_t>(kv_.size() + (has_alignment || alignment_ == 32 ? 0 : 1));
  for (const auto& [key, value] : kv_) {
    o.put_string(key);
    o.put<uint32_t>(static_cast<uint32_t>(value.type));
    put_value(o, value);
  }
  if (!has_alignment && alignment_ != 32) {
    o.put_string("general.alignment");
    o.put<uint32_t>(static_cast<uint32_t>(ValueType::kUint32));
    o.put<uint32_t>(static_cast<uint32_t>(alignment_));
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    o.put_string(t.name);
    o.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) o.put<uint64_t>(static_cast<uint64_t>(d));
    o.put<uint32_t>(t.type);
    o.put<uint64_t>(offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  o.pad_to(alignment_);
  for (const auto& t : tensors_) {
    buf.insert(buf.end(), t.data.begin(), t.data.end());
    o.pad_to(alignment_);
  }
  return buf;
}

Status GgufWriter::write(const std::string& path) const {
  std::vector<uint8_t> bytes = to_bytes();
  std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return invalid_argument("cannot write '" + path + "': " + std::strerror(errno));
  size_t w = std::fwrite(bytes.data(), 1, bytes.size(), f);
  bool ok = w == bytes.size() && std::fflush(f) == 0;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return invalid_argument("short write to '" + path + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return invalid_argument("cannot rename into '" + path + "': " + ec.message());
  return ok_status();
}

}  // namespace ts::gguf
