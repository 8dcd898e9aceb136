// HTTP/1.1 response framing by hand (status line, headers, chunk framing), Beast-free so it is
// cheap to compile and to test. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "http/message.h"

namespace ts::http {

// Status line + Server/Content-Type/framing/Connection headers + `headers` + blank line.
// Exactly one of content_length / chunked frames the body (neither: the close ends it).
// Framing headers the caller put in `headers` (Content-Length, Transfer-Encoding,
// Connection) are dropped; CR and LF are removed from names and values (no header injection).
std::string format_response_head(int status, std::string_view server_name,
                                 std::string_view content_type, const HeaderList& headers,
                                 std::optional<size_t> content_length, bool chunked,
                                 bool keep_alive);

// Appends `data` as one chunk ("<hex size>\r\n<data>\r\n"); nothing for empty data, which would
// otherwise end the body.
void append_chunk(std::string* out, std::string_view data);

// The last chunk, ending a chunked body.
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

}  // namespace ts::http
