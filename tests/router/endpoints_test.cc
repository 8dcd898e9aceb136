#include "router/endpoints.h"

#include <fstream>
#include <thread>

#include <gtest/gtest.h>

namespace ts::router {
namespace {

TEST(EndpointsYaml, ParsesLlmdFileDiscoverySchema) {
  auto r = parse_endpoints_yaml(R"(# pool
endpoints:
  - name: r1
    address: 10.213.0.11
    port: 8000
    labels:
      model: stories260K
      zone: "a"   # quoted
  - name: 'r2'
    address: 127.0.0.1
    port: "8001"
  - {name: r3, address: localhost, port: 8002, labels: {}}
)");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].name, "r1");
  EXPECT_EQ((*r)[0].address, "10.213.0.11");
  EXPECT_EQ((*r)[0].port, 8000);
  EXPECT_EQ((*r)[0].labels.at("model"), "stories260K");
  EXPECT_EQ((*r)[0].labels.at("zone"), "a");
  EXPECT_EQ((*r)[1].name, "r2");
  EXPECT_EQ((*r)[1].port, 8001);
  EXPECT_TRUE((*r)[1].labels.empty());
  EXPECT_EQ((*r)[2].address, "localhost");
  EXPECT_EQ((*r)[2].port, 8002);
}

TEST(EndpointsYaml, SequenceAtKeyIndentAndDefaultName) {
  auto r = parse_endpoints_yaml("---\nendpoints:\n- address: 127.0.0.1\n  port: 9000\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].name, "127.0.0.1:9000");
}

TEST(EndpointsYaml, EmptyListIsValid) {
  auto a = parse_endpoints_yaml("endpoints: []\n");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->empty());
  auto b = parse_endpoints_yaml("endpoints:\n");
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->empty());
}

TEST(EndpointsYaml, ErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* needle;
  } cases[] = {
      {"pool:\n  - a\n", "no top-level 'endpoints:'"},
      {"endpoints:\n  - name: a\n    port: 80\n", "line 2: endpoint without 'address'"},
      {"endpoints:\n  - name: a\n    address: x\n", "without 'port'"},
      {"endpoints:\n  - name: a\n    address: x\n    port: 70000\n", "line 4: port must be"},
      {"endpoints:\n  - name: a\n    address: x\n    port: 8o\n", "port must be"},
      {"endpoints:\n  - {name: a, address: x, port: 1}\n  - {name: a, address: y, port: 2}\n", "duplicate endpoint name 'a'"},
      {"endpoints:\n  - &x {name: a}\n", "unsupported"},
      {"endpoints:\n\t- name: a\n", "tabs"},
      {"endpoints:\n  - name: a\n     address: x\n", "line 3: unexpected indentation"},
      {"endpoints:\n  - name: \"a\n", "unterminated"},
      {"endpoints: 5\n", "must be a list"},
      {"endpoints:\n  - just-a-string\n", "must be a mapping"},
      {"a: 1\na: 2\nendpoints: []\n", "duplicate key 'a'"},
  };
  for (const Case& c : cases) {
    auto r = parse_endpoints_yaml(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << c.text << " -> " << r.status().message();
  }
}

TEST(EndpointsWatcher, PicksUpEditsAndKeepsListOnBadFile) {
  auto path = std::filesystem::temp_directory_path() / ("ts_endpoints_" + std::to_string(::getpid()) + ".yaml");
  auto write = [&](const std::string& s) {
    std::ofstream(path, std::ios::trunc) << s;
  };
  write("endpoints:\n  - {name: a, address: 127.0.0.1, port: 1}\n");
  EndpointsWatcher w(path);
  auto p = w.poll();
  EXPECT_TRUE(p.changed);
  ASSERT_EQ(w.endpoints().size(), 1u);
  EXPECT_FALSE(w.poll().changed);  // unchanged file
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  write("endpoints:\n  - {name: a, address: 127.0.0.1, port: 1}\n  - {name: b, address: 127.0.0.1, port: 2}\n");
  p = w.poll();
  EXPECT_TRUE(p.changed);
  ASSERT_EQ(w.endpoints().size(), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  write("endpoints:\n  - {name: a\n");
  p = w.poll();
  EXPECT_FALSE(p.changed);
  EXPECT_FALSE(p.error.ok());
  EXPECT_EQ(w.endpoints().size(), 2u);
  std::filesystem::remove(path);
  p = w.poll();
  EXPECT_FALSE(p.error.ok());
  EXPECT_EQ(w.endpoints().size(), 2u);
}

}  // namespace
}  // namespace ts::router
