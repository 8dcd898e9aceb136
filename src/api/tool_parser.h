// Turns a chat model's raw output text into the OpenAI message parts: `content`, the reasoning
// (`reasoning_content`) and `tool_calls`, per template family. The family is detected from the
// chat template's source (detect_tool_call_format) or named on the command line
// (`serve --tool-call-format`).
//
// Output formats (what the models emit, from their chat templates and model cards):
//   hermes    <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>   (Hermes 2/3, Qwen2.5, Qwen3, SmolLM3)
//   llama3    {"name": N, "parameters": {...}}  (the whole output; several joined by ';'), or
//             <|python_tag|>{...} / <|python_tag|>tool.call(k="v", ...) (built-in tools)
//   mistral   [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]   (Nemo; v3 tokenizers) or
//             [TOOL_CALLS]N[ARGS]{...} repeated                     (Devstral, Magistral; v11+)
//   deepseek  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//             (V3/R1; also V3.1's <｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>)
//   granite   <|tool_call|>[{"name": N, "arguments": {...}}, ...]
//   harmony   gpt-oss channels: <|channel|>analysis<|message|>… (reasoning), <|channel|>final<|message|>…
//             (content), <|channel|>commentary to=functions.N <|constrain|>json<|message|>{...}<|call|>
// Reasoning: <think>…</think> (Qwen3, DeepSeek-R1 distills, SmolLM3, Granite's thinking mode);
// harmony's analysis channel.
//
// A tool call whose arguments are not a JSON object (or that names no function) is not a call:
// its raw text stays in `content`, so nothing the model wrote is lost.
// Marker texts that are control tokens (e.g. <|python_tag|>, [TOOL_CALLS], harmony's markers)
// are not in the engine's text: the caller splices them back in (ResponseJob does, from the
// token ids), see OutputParserConfig::markers().
// Pure functions and plain values; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ts::api {

enum class ToolCallFormat { kNone, kHermes, kLlama3, kMistral, kDeepSeek, kGranite, kHarmony };
enum class ReasoningFormat { kNone, kThink, kHarmony };

const char* tool_call_format_name(ToolCallFormat f);  // "none" | "hermes" | ... | "harmony"
// Accepts the names above (and "qwen" for hermes, "gpt-oss" for harmony); nullopt otherwise.
std::optional<ToolCallFormat> parse_tool_call_format(std::string_view name);
// The family a chat template's source writes tool calls in; kHermes when it shows none of the
// known markers (ChatML-style models trained on Hermes' format are the common case).
ToolCallFormat detect_tool_call_format(std::string_view template_source);
// kThink when the template handles <think>, kHarmony for gpt-oss channels, kNone otherwise.
ReasoningFormat detect_reasoning_format(std::string_view template_source);

struct ParsedToolCall {
  std::string name;
  std::string arguments;              // a JSON object as compact text
};

struct ParsedOutput {
  std::string content;
  std::string reasoning;              // "" when none
  std::vector<ParsedToolCall> calls;  // complete calls, in order
  // Not final only: the call the model is writing now (its index is calls.size()), once its
  // name is known and its arguments are an object being written: the name and the arguments so
  // far, as a prefix of the compact text the complete call will have. Nullopt otherwise.
  std::optional<ParsedToolCall> partial;
};

struct OutputParserConfig {
  ToolCallFormat tools = ToolCallFormat::kNone;  // kNone: no tool parsing (tool_choice none, no tools)
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  bool starts_in_reasoning = false;   // the prompt ended inside <think> (DeepSeek-R1's template)
  // Marker texts the parsers look for (tool and reasoning markers of the chosen formats).
  std::vector<std::string> markers() const;
  bool active() const { return tools != ToolCallFormat::kNone || reasoning != ReasoningFormat::kNone; }
};

// Parses `text`, the output so far. With final = false the result is the part that is already
// certain: text that could still become (or is inside) a tool call or a marker is held back, and
// only complete calls are returned. Monotone: for a longer text the content and reasoning of an
// earlier non-final result are prefixes of the later ones, and its calls a prefix of its calls
// (OutputStreamParser relies on this). With final = true everything is placed.
ParsedOutput parse_model_output(const OutputParserConfig& cfg, std::string_view text, bool final);

// Whether a prompt's rendered text ends inside an open <think> (its generation prompt opens the
// reasoning, as DeepSeek-R1's template does).
bool prompt_opens_reasoning(std::string_view rendered_prompt);

// A new tool call id: "call_" + 24 random alphanumerics, or 9 alphanumerics for mistral (its
// templates refuse other ids when the call is sent back).
std::string new_tool_call_id(ToolCallFormat f);

// A call list as the family's model writes it (the inverse of parse_model_output for calls):
// for templates that do not render an assistant's tool_calls themselves.
std::string render_tool_calls(ToolCallFormat f, const std::vector<ParsedToolCall>& calls);

// Streaming: feed the output text as it comes; each push returns what became certain. Content
// and reasoning stream as they come (a possible marker at the end waits for the next text); a
// tool call's first delta (index, id, name) is sent as soon as its name is known, then its
// arguments stream in fragments as the model writes them (ParsedOutput::partial); their
// concatenation equals the non-streamed arguments. Arguments given as a JSON string (not an
// object), and llama3's bare calls (no end marker), are sent whole once the call is complete;
// in granite/mistral/deepseek lists only the first call streams piece by piece, the others come
// whole when the list closes. A call whose first part was streamed but that turns out malformed
// stays as sent (its raw text then also appears in content), the one case where the stream
// differs from the non-streamed answer; constrained calls (tool_choice required or named) cannot
// be malformed. Each push re-parses the output so far: O(n) per push, fine for the few thousand tokens
// of a turn (measured: 25,000 pushes building 125k characters of reasoning take 0.24 s in all).
struct ToolCallDelta {
  int32_t index = 0;                  // call index in the message
  std::string id;                     // first delta of a call only
  std::string name;                   // first delta of a call only
  std::string arguments;              // argument text fragment
};
struct OutputDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return content.empty() && reasoning.empty() && calls.empty(); }
};

class OutputStreamParser {
 public:
  explicit OutputStreamParser(OutputParserConfig cfg) : cfg_(std::move(cfg)) {}
  OutputDelta push(std::string_view text);
  OutputDelta finish();               // end of output: places what was held back
  const std::vector<std::string>& call_ids() const { return ids_; }
  size_t num_calls() const { return ids_.size(); }
  // Content or a call has been sent: the reasoning (if any) is over.
  bool answer_started() const { return content_sent_ > 0 || !ids_.empty(); }

 private:
  OutputDelta diff(const ParsedOutput& now);
  OutputParserConfig cfg_;
  std::string text_;
  size_t content_sent_ = 0, reasoning_sent_ = 0;
  std::vector<std::string> ids_;      // one per call sent
  std::vector<std::string> args_sent_;  // per call: the argument text sent so far
};

}  // namespace ts::api
