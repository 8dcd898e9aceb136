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

// Kernel ISA for this process, chosen once at start-up (before any model is loaded): `flag`
// (the command's --isa) if non-empty, else the TOKENSERVE_ISA environment variable, else the
// best tier the CPU has. A tier the CPU lacks is clamped down with a warning log line.
// Returns -1 to continue, or 2 after a one-line error for an unknown name.
int apply_isa(const char* cmd, const std::string& flag);
inline constexpr const char* kIsaHelp = "kernel ISA: scalar, avx2, avxvnni, avx512 or amx (default: TOKENSERVE_ISA, else the best the CPU has)";

// One error line "tokenserve CMD: message" on stderr; returns `code`.
int fail(const char* cmd, const std::string& message, int code = 1);

// --io-rt-max-wakeups (serve and gateway; http/io_rt.h), default 250 per 250 ms window.
void add_io_rt_max_wakeups(CLI::App& app, int64_t* max_wakeups);

}  // namespace ts::cli
