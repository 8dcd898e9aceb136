// StopMatcher: finds stop strings in a stream of text deltas that may split them anywhere
// (across tokens). It emits only text that can no longer be the start of a stop string, so a
// stream never leaks a partial match, and drops the stop string and everything after it.
//
// Input must be complete UTF-8 (e.g. from tokenizer::StreamDecoder); because a held-back
// suffix always starts where a stop string starts, emitted pieces stay valid UTF-8.
// Not thread-safe (one per sequence).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ts::engine {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds text; returns what is now safe to emit. After a stop string is found, stopped() is
  // true, the text before it is returned and later pushes return "".
  std::string push(std::string_view text);
  // End of stream without a stop: the held-back text.
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that matched ("" if none).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace ts::engine
