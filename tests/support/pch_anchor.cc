// The one source of the ts_test_pch target (tests/CMakeLists.txt): CMake builds the test
// binaries' shared precompiled header beside it. Nothing here is linked into a test.
namespace ts::test {
int pch_anchor = 0;
}  // namespace ts::test
