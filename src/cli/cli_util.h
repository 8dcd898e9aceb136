// Shared command-line plumbing: CLI11 parsing with one-line errors, byte-size parsing.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace ts::cli {

// Parses argv with `app`. Returns -1 to continue, or the exit code to return now:
// 0 after --help, 2 after a bad argument (one line on stderr: "tokenserve CMD: message").
int parse_or_exit(CLI::App& app, int argc, char** argv);

// "2GiB", "512MiB", "1.5G", "1000000" -> bytes; nullopt when malformed.
std::optional<uint64_t> parse_bytes(const std::string& s);

// One error line "tokenserve CMD: message" on stderr; returns `code`.
int fail(const char* cmd, const std::string& message, int code = 1);

}  // namespace ts::cli
