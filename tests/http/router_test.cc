#include "http/router.h"

#include <gtest/gtest.h>

namespace ts::http {
namespace {

Handler tagged(int* out, int tag) {
  return [out, tag](const ExchangePtr&) { *out = tag; };
}

TEST(Router, MatchesLiteralsAndParams) {
  int hit = 0;
  Router r;
  r.add(Method::kGet, "/v1/models", tagged(&hit, 1));
  r.add(Method::kGet, "/v1/models/{id}", tagged(&hit, 2));
  r.add(Method::kPost, "/v1/completions", tagged(&hit, 3));

  auto m = r.match(Method::kGet, "/v1/models");
  ASSERT_EQ(m.kind, Router::MatchKind::kFound);
  (*m.handler)(nullptr);
  EXPECT_EQ(hit, 1);
  EXPECT_TRUE(m.params.empty());

  m = r.match(Method::kGet, "/v1/models/stories%2D260K");
  ASSERT_EQ(m.kind, Router::MatchKind::kFound);
  (*m.handler)(nullptr);
  EXPECT_EQ(hit, 2);
  ASSERT_EQ(m.params.size(), 1u);
  EXPECT_EQ(m.params[0].first, "id");
  EXPECT_EQ(m.params[0].second, "stories-260K");  // percent-decoded

  EXPECT_EQ(r.match(Method::kGet, "/v1/models/").kind, Router::MatchKind::kNoPath);
  EXPECT_EQ(r.match(Method::kGet, "/v1/models/a/b").kind, Router::MatchKind::kNoPath);
  EXPECT_EQ(r.match(Method::kGet, "/v2/models").kind, Router::MatchKind::kNoPath);
  EXPECT_EQ(r.match(Method::kGet, "/").kind, Router::MatchKind::kNoPath);
}

TEST(Router, MethodNotAllowedListsAllowedMethods) {
  int hit = 0;
  Router r;
  r.add(Method::kPost, "/v1/completions", tagged(&hit, 1));
  r.add(Method::kPut, "/v1/completions", tagged(&hit, 2));
  auto m = r.match(Method::kGet, "/v1/completions");
  EXPECT_EQ(m.kind, Router::MatchKind::kMethodNotAllowed);
  ASSERT_EQ(m.allowed.size(), 2u);
  EXPECT_EQ(m.allowed[0], Method::kPost);
  EXPECT_EQ(m.allowed[1], Method::kPut);
  EXPECT_EQ(m.handler, nullptr);
}

TEST(Router, HeadMatchesGetAndFirstRouteWins) {
  int hit = 0;
  Router r;
  r.add(Method::kGet, "/health", tagged(&hit, 1));
  r.add(Method::kGet, "/health", tagged(&hit, 2));
  auto m = r.match(Method::kHead, "/health");
  ASSERT_EQ(m.kind, Router::MatchKind::kFound);
  (*m.handler)(nullptr);
  EXPECT_EQ(hit, 1);
}

TEST(Router, RestParameterKeepsSlashes) {
  int hit = 0;
  Router r;
  r.add(Method::kGet, "/v1/models/{id*}", tagged(&hit, 1));
  auto m = r.match(Method::kGet, "/v1/models/org/model-7b");
  ASSERT_EQ(m.kind, Router::MatchKind::kFound);
  EXPECT_EQ(m.params[0].second, "org/model-7b");
  EXPECT_EQ(r.match(Method::kGet, "/v1/models").kind, Router::MatchKind::kNoPath);
}

TEST(Router, BadPercentEscapeDoesNotMatch) {
  int hit = 0;
  Router r;
  r.add(Method::kGet, "/m/{id}", tagged(&hit, 1));
  EXPECT_EQ(r.match(Method::kGet, "/m/a%2").kind, Router::MatchKind::kNoPath);
  EXPECT_EQ(r.match(Method::kGet, "/m/a%zz").kind, Router::MatchKind::kNoPath);
  EXPECT_EQ(r.match(Method::kGet, "/m/a%20b").params[0].second, "a b");
}

TEST(Message, HeaderLookupIsCaseInsensitive) {
  Request req;
  req.headers = {{"Authorization", "Bearer k"}, {"X-Request-Id", "abc"}};
  EXPECT_EQ(req.header("authorization"), "Bearer k");
  EXPECT_EQ(req.header("x-request-id"), "abc");
  EXPECT_EQ(req.header("missing"), "");
  EXPECT_FALSE(req.has_header("missing"));
  Response resp;
  resp.set_header("Retry-After", "1");
  resp.set_header("retry-after", "2");
  ASSERT_EQ(resp.headers.size(), 1u);
  EXPECT_EQ(resp.headers[0].second, "2");
}

}  // namespace
}  // namespace ts::http
