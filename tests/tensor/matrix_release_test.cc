// MatrixOptions::release_source: after repacking a tensor that lies in a read-only file mapping,
// no second resident copy of its weights stays in this process (checked page by page with
// /proc/self/pagemap's "present" bit), and the matrix still computes from its own arena.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tensor/matrix.h"

namespace ts::tensor {
namespace {

struct IsaGuard {
  Isa saved = active_isa();
  ~IsaGuard() { set_isa(saved); }
};

// Whether the page holding `p` is mapped in this process (not just in the page cache).
bool page_present(int pagemap_fd, const void* p) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  uint64_t entry = 0;
  const off_t off = static_cast<off_t>(reinterpret_cast<uintptr_t>(p) / page * 8);
  if (pread(pagemap_fd, &entry, 8, off) != 8) return true;  // unknown: treat as present
  return (entry >> 63) & 1;
}

// Q8_0 is repacked into the arena; F16 rows are copied there as they are (MatrixOptions): either
// way the matrix owns its weights and the file's pages go.
class MatrixRelease : public ::testing::TestWithParam<DType> {};

TEST_P(MatrixRelease, RepackedFileMappingLeavesNoResidentSourceCopy) {
  if (detected_isa() < Isa::kAvx2) GTEST_SKIP() << "no repacked layouts on this CPU";
  const DType type = GetParam();
  const int pm = open("/proc/self/pagemap", O_RDONLY);
  if (pm < 0) GTEST_SKIP() << "no /proc/self/pagemap";
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const int64_t rows = 48, cols = 2048;
  const size_t rb = row_bytes(*type_traits(static_cast<uint32_t>(type)), cols);
  const size_t tensor_bytes = rb * static_cast<size_t>(rows);
  const size_t head = page + 100;  // the tensor starts inside a page, like GGUF tensors do
  std::vector<uint8_t> file(head + tensor_bytes + page, 7);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = dist(rng);
    quantize_row(type, row.data(), file.data() + head + rb * static_cast<size_t>(r), cols);
  }
  char path[] = "/tmp/ts_matrix_release_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, file.data(), file.size()), static_cast<ssize_t>(file.size()));
  void* map = mmap(nullptr, file.size(), PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  unlink(path);
  ASSERT_NE(map, MAP_FAILED);
  const auto* base = static_cast<const uint8_t*>(map);
  volatile uint8_t sink = 0;
  for (size_t off = 0; off < file.size(); off += page) sink = static_cast<uint8_t>(sink + base[off]);
  const uint8_t* t = base + head;
  const uint8_t* first_full = base + (head + page - 1) / page * page;
  const uint8_t* end_full = base + (head + tensor_bytes) / page * page;
  ASSERT_LT(first_full, end_full);
  for (const uint8_t* p = first_full; p < end_full; p += page) ASSERT_TRUE(page_present(pm, p));

  IsaGuard guard;
  set_isa(Isa::kAvx2);  // the lowest tier that repacks (AVX-512 uses the same layouts)
  auto m = Matrix::create(type, t, rows, cols, MatrixOptions{.release_source = true});
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->repacked());  // every type, F16 (column-interleaved) included
  ASSERT_TRUE(m->owns_weights());
  EXPECT_EQ(m->released_source_bytes(), static_cast<size_t>(end_full - first_full));
  EXPECT_GE(m->resident_bytes(), m->weight_bytes());
  int still = 0;
  for (const uint8_t* p = first_full; p < end_full; p += page) still += page_present(pm, p) ? 1 : 0;
  EXPECT_EQ(still, 0) << "source pages still mapped after release";
  // Pages shared with the neighbours (the partial first and last ones) are kept.
  EXPECT_TRUE(page_present(pm, base));
  EXPECT_TRUE(page_present(pm, base + file.size() - 1));

  // Still computes what a matrix over an untouched heap copy does.
  auto ref = Matrix::create(type, file.data() + head, rows, cols);
  ASSERT_TRUE(ref.ok());
  std::vector<float> x(static_cast<size_t>(3 * cols)), y1(static_cast<size_t>(3 * rows)), y2(y1.size());
  for (float& v : x) v = dist(rng);
  m->matmul(x.data(), 3, y1.data(), nullptr);
  ref->matmul(x.data(), 3, y2.data(), nullptr);
  EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4));
  std::vector<float> d1(static_cast<size_t>(cols)), d2(d1.size());
  m->dequantize_row(rows - 1, d1.data());
  dequantize_row(type, file.data() + head + rb * static_cast<size_t>(rows - 1), d2.data(), cols);
  EXPECT_EQ(0, std::memcmp(d1.data(), d2.data(), d1.size() * 4));
  // Without the option the source stays mapped.
  for (size_t off = 0; off < file.size(); off += page) sink = static_cast<uint8_t>(sink + base[off]);
  auto keep = Matrix::create(type, t, rows, cols);
  ASSERT_TRUE(keep.ok());
  EXPECT_EQ(keep->released_source_bytes(), 0u);
  EXPECT_TRUE(keep->owns_weights());
  EXPECT_TRUE(page_present(pm, first_full));
  munmap(map, file.size());
  close(pm);
}

INSTANTIATE_TEST_SUITE_P(Types, MatrixRelease, ::testing::Values(DType::kQ8_0, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(i.param == DType::kF16 ? "f16" : "q8_0"); });

}  // namespace
}  // namespace ts::tensor
