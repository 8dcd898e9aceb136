// `tokenserve template` contract: exact rendering on stdout, raise_exception message on stderr
// with exit 1, one clear line and exit 2 for bad arguments or unreadable files. The golden case
// reproduces the shared fixtures with the bos/eos/date they were made with.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/template_command.h"
#include "test_util.h"

namespace ts::chat {
namespace {

using ojson = nlohmann::ordered_json;

std::string write(const std::string& dir, const std::string& name, const std::string& content) {
  std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(TemplateCommand, ReproducesSharedFixturesByteForByte) {
  TS_REQUIRE_SHARED(cases_path, "chat-templates/cases.json");
  std::string dir = cases_path.substr(0, cases_path.rfind('/'));
  ojson cases = ojson::parse(ts::testing::read_file(cases_path));
  std::string tmp = ts::testing::temp_dir();
  int checked = 0;
  for (const auto& [name, t] : cases["templates"].items()) {
    for (const auto& id : t["cases"]) {
      const ojson& c = cases["cases"][id.get<std::string>()];
      std::string expected_path = dir + "/expected/" + name + "." + id.get<std::string>() + ".txt";
      std::string error_path = dir + "/expected/" + name + "." + id.get<std::string>() + ".error.txt";
      std::vector<std::string> args = {"-t", dir + "/" + t["file"].get<std::string>(), "--messages",
                                       write(tmp, "m.json", c["messages"].dump()), "--bos",
                                       t["bos_token"].get<std::string>(), "--eos",
                                       t["eos_token"].get<std::string>(), "--now", "2024-07-26T00:00:00"};
      if (c["add_generation_prompt"].get<bool>()) args.push_back("--add-generation-prompt");
      if (c.contains("tools")) {
        args.push_back("--tools");
        args.push_back(write(tmp, "tools.json", c["tools"].dump()));
      }
      CommandOutput r = run_template_command(args);
      SCOPED_TRACE(name + "." + id.get<std::string>());
      if (std::ifstream(expected_path)) {
        EXPECT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(r.out, ts::testing::read_file(expected_path));
        EXPECT_EQ(r.err, "");
        ++checked;
      } else if (std::ifstream(error_path)) {
        EXPECT_EQ(r.exit_code, 1);
        EXPECT_EQ(r.out, "");
        EXPECT_EQ(r.err, ts::testing::read_file(error_path) + "\n");
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 46);
}

TEST(TemplateCommand, PrintsRenderingWithoutExtraNewline) {
  std::string tmp = ts::testing::temp_dir();
  std::string t = write(tmp, "t.jinja", "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"
                                        "{% if add_generation_prompt %}>{% endif %}{{ eos_token }}");
  std::string m = write(tmp, "m.json", R"([{"role": "user", "content": "hi"}])");
  CommandOutput r = run_template_command({"-t", t, "--messages", m, "--bos", "<s>", "--eos", "</s>",
                                          "--add-generation-prompt"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<s>hi></s>");
  r = run_template_command({"--messages", m, "-t", t});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "hi");  // bos/eos default to "", no generation prompt
}

TEST(TemplateCommand, MessagesObjectAndVarsBecomeVariables) {
  std::string tmp = ts::testing::temp_dir();
  std::string t = write(tmp, "t.jinja", "{{ messages | length }}{{ enable_thinking }}{{ add_generation_prompt }}{{ mode }}");
  std::string m = write(tmp, "m.json", R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": true})");
  CommandOutput r = run_template_command({"-t", t, "--messages", m, "--var", "enable_thinking=false",
                                          "--var", "mode=fast"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1FalseTruefast");
}

TEST(TemplateCommand, NowFixesStrftimeNow) {
  std::string tmp = ts::testing::temp_dir();
  std::string t = write(tmp, "t.jinja", "{{ strftime_now('%d %b %Y') }}");
  std::string m = write(tmp, "m.json", "[]");
  CommandOutput r = run_template_command({"-t", t, "--messages", m, "--now", "2024-07-26T00:00:00"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "26 Jul 2024");
}

TEST(TemplateCommand, RaiseExceptionGoesToStderrWithExitOne) {
  std::string tmp = ts::testing::temp_dir();
  std::string t = write(tmp, "t.jinja", "partial{{ raise_exception('Only user and assistant roles are supported!') }}");
  std::string m = write(tmp, "m.json", "[]");
  CommandOutput r = run_template_command({"-t", t, "--messages", m});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "Only user and assistant roles are supported!\n");
}

TEST(TemplateCommand, TemplateSyntaxErrorIsExitOneWithPosition) {
  std::string tmp = ts::testing::temp_dir();
  std::string t = write(tmp, "t.jinja", "ok\n{% if %}");
  std::string m = write(tmp, "m.json", "[]");
  CommandOutput r = run_template_command({"-t", t, "--messages", m});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("line 2, column"), std::string::npos) << r.err;
  EXPECT_EQ(count_lines(r.err), 1);
}

TEST(TemplateCommand, BadArgumentsAndFilesAreExitTwoWithOneLine) {
  std::string tmp = ts::testing::temp_dir();
  std::string t = write(tmp, "t.jinja", "x");
  std::string m = write(tmp, "m.json", "[]");
  std::string bad_json = write(tmp, "bad.json", "{not json");
  std::string not_list = write(tmp, "obj.json", R"({"a": 1})");
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"-t", t},
      {"--messages", m},
      {"-t", tmp + "/missing.jinja", "--messages", m},
      {"-t", t, "--messages", tmp + "/missing.json"},
      {"-t", t, "--messages", bad_json},
      {"-t", t, "--messages", not_list},
      {"-t", t, "--messages", m, "--tools", not_list},
      {"-t", t, "--messages", m, "--now", "26/07/2024"},
      {"-t", t, "--messages", m, "--frobnicate"},
      {"-t", t, "--messages", m, "--bos"},
      {"-t", t, "--messages", m, "--var", "novalue"},
  };
  for (const auto& args : bad) {
    CommandOutput r = run_template_command(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined;
    EXPECT_EQ(r.out, "") << joined;
    EXPECT_EQ(count_lines(r.err), 1) << joined << ": " << r.err;
    EXPECT_EQ(r.err.rfind("tokenserve template: ", 0), 0u) << r.err;
  }
}

TEST(TemplateCommand, HelpIsExitZero) {
  CommandOutput r = run_template_command({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("usage: tokenserve template"), std::string::npos);
}

}  // namespace
}  // namespace ts::chat
