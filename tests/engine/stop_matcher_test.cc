#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

namespace ts::engine {
namespace {

TEST(StopMatcher, FindsStopSpanningPiecesAndNeverLeaksPartialMatch) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("ab"), "ab");
  EXPECT_EQ(m.push("cS"), "c");   // "S" might begin "STOP": held back
  EXPECT_EQ(m.push("TO"), "");    // "STO" still held back
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("Pxyz"), "");  // stop found; nothing after it is emitted
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "STOP");
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, ReleasesHeldTextWhenMatchBreaks) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("xx ST"), "xx ");
  EXPECT_EQ(m.push("AY"), "STAY");
  EXPECT_EQ(m.push("S"), "");
  EXPECT_EQ(m.flush(), "S");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo w", "\n\n"});
  std::string out = m.push("hel");
  out += m.push("lo world");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "lo w");
  EXPECT_EQ(out, "hel");
}

TEST(StopMatcher, StopInsideOnePieceCutsIt) {
  StopMatcher m({"\n\n"});
  EXPECT_EQ(m.push("line one\n\nline two"), "line one");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, HoldsMultibyteCharactersWhole) {
  StopMatcher m({"\xC3\xA9!"});            // "é!"
  EXPECT_EQ(m.push("caf\xC3\xA9"), "caf");  // "é" may begin the stop: held whole
  EXPECT_EQ(m.push("?"), "\xC3\xA9?");
  EXPECT_EQ(m.push("\xC3\xA9!"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, WithoutStopsPassesThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_EQ(m.flush(), "");
}

}  // namespace
}  // namespace ts::engine
