#include "server/structured_output.h"

namespace ts::server {

api::ApiResult<std::shared_ptr<const structured::Constraint>> constraint_for(
    const api::ResponseFormat& rf, const tokenizer::Tokenizer& tok, const std::string& start_after) {
  using T = api::ResponseFormat::Type;
  structured::ConstraintSpec spec;
  const char* what = "";
  switch (rf.type) {
    case T::kText: return std::shared_ptr<const structured::Constraint>();
    case T::kJsonObject: spec.kind = structured::ConstraintKind::kJsonObject; what = "json_object"; break;
    case T::kJsonSchema: spec.kind = structured::ConstraintKind::kJsonSchema; what = "json_schema"; break;
    case T::kGrammar: spec.kind = structured::ConstraintKind::kGrammar; what = "grammar"; break;
    case T::kRegex: spec.kind = structured::ConstraintKind::kRegex; what = "regex"; break;
  }
  spec.source = rf.source;
  spec.start_after = start_after;
  auto c = structured::compile_cached(spec, structured::TokenIndex::for_tokenizer(tok));
  if (!c.ok()) {
    api::ApiError e = api::invalid_value("response_format", "Invalid 'response_format' (" + std::string(what) +
                                                                "): " + c.status().message(),
                                         "invalid_response_format");
    return e;
  }
  return std::move(c).value();
}

}  // namespace ts::server
