// TEST-ONLY backend (`serve --scripted-replies FILE`): answers each generation request with the
// next reply of a script instead of running the model, so end-to-end tests of tool calling can
// make a tiny random-weight model "call" tools deterministically.
//
// What it replaces, honestly: the forward pass and sampling only. The reply text is tokenized
// with the real model's tokenizer (control tokens written in it, e.g. "[TOOL_CALLS]", become
// control tokens) and streamed token by token as engine events, decoded the way the engine
// decodes (control tokens carry no text), so the server's real path runs on it: request
// validation, chat template rendering, tokenization, the tool-call / reasoning parsers and
// control-token splicing, SSE framing, usage and the ledger. It also checks the real prompt:
// a reply may list strings the rendered prompt must contain (e.g. a tool result sent back by
// the client); a prompt without them fails the request (engine error event), so a test sees
// whether the conversation really reached the model.
//
// Script file: a JSON array of {"reply": "...", "expect_in_prompt": ["..."]}. Replies are used in
// order, one per submitted request (each choice of n > 1 gets the same reply); when the script is
// used up a request fails with an error event. max_tokens cuts a reply (finish "length").
// Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/backend.h"
#include "tokenizer/tokenizer.h"

namespace ts::server {

struct ScriptedReply {
  std::string reply;                          // raw model output text
  std::vector<std::string> expect_in_prompt;  // substrings of the decoded prompt
};

class ScriptedBackend : public Backend {
 public:
  // kInvalidArgument with the reason when the file is unreadable or not a script.
  static Result<std::vector<ScriptedReply>> load(const std::string& path);
  ScriptedBackend(const tokenizer::Tokenizer& tok, std::vector<ScriptedReply> script, int32_t max_model_len);

  Result<std::shared_ptr<engine::RequestHandle>> submit(engine::Request req) override;
  int32_t max_model_len() const override { return max_model_len_; }
  void stop_accepting() override { stopped_ = true; }
  engine::EngineStats stats() const override { return {}; }

 private:
  const tokenizer::Tokenizer& tok_;
  std::vector<ScriptedReply> script_;
  int32_t max_model_len_;
  std::mutex mu_;
  size_t next_ = 0;
  std::atomic<bool> stopped_{false};
};

}  // namespace ts::server
