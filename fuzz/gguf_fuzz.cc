// libFuzzer target over the GGUF reader: any byte string must be parsed or refused with a
// message, never crash, hang or over-allocate.
#include <cstdint>
#include <span>

#include "gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = ts::gguf::GgufFile::from_bytes(std::span<const uint8_t>(data, size));
  if (r.ok()) {
    // Touch every tensor's first and last byte: views must lie inside the image.
    volatile uint8_t sink = 0;
    for (const auto& t : (*r)->tensors()) {
      if (t.num_bytes) sink = sink + t.data[0] + t.data[t.num_bytes - 1];
    }
    (void)sink;
  } else if (r.status().message().empty()) {
    __builtin_trap();
  }
  return 0;
}
