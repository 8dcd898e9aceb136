// HTTP request/response values and the per-request Exchange a handler answers through.
// Beast-free on purpose: only src/http/server.cc includes Boost.Beast.
//
// The http module knows HTTP only (no OpenAI, no JSON schema): methods, paths, headers, bodies,
// whole or chunked responses, and the client's disconnect.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ts::http {

enum class Method { kGet, kHead, kPost, kPut, kDelete, kPatch, kOptions, kOther };

const char* method_name(Method m);
Method parse_method(std::string_view name);

// Case-insensitive ASCII comparison, for header names.
bool iequals(std::string_view a, std::string_view b);

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// One parsed request. Owned by the Exchange; immutable once the handler runs.
struct Request {
  Method method = Method::kGet;
  std::string method_text;  // as sent ("GET"), also for kOther
  std::string target;       // raw request-target, e.g. "/v1/models/a%2Fb?x=1"
  std::string path;         // target without the query, not percent-decoded
  std::string query;        // after '?', "" when none
  HeaderList headers;       // in arrival order, names as sent
  std::string body;
  // Filled by the router: {name} segments of the matched pattern, percent-decoded.
  std::vector<std::pair<std::string, std::string>> path_params;
  std::string remote_address;  // "127.0.0.1:54321"

  // First header with that name (case-insensitive); "" when absent.
  std::string_view header(std::string_view name) const;
  bool has_header(std::string_view name) const;
  // Path parameter by name; "" when absent.
  std::string_view path_param(std::string_view name) const;
};

// A whole (non-streamed) response.
struct Response {
  int status = 200;
  std::string content_type = "application/json";
  HeaderList headers;  // extra headers (Retry-After, x-ratelimit-*, x-request-id ...)
  std::string body;

  // Replaces any header of the same name.
  void set_header(std::string name, std::string value);
};

// The server's side of one request. Handlers receive a shared_ptr to it and answer exactly once,
// either with respond() or with start_stream() + write()* + finish(), now or later and from any
// thread (e.g. the engine's event consumer). All methods are thread-safe.
//
// Cancellation: when the client disconnects (or a timeout or forced drain closes the connection)
// before the response is complete, cancelled() turns true and the on_cancel callback runs once,
// on an io thread, within milliseconds. After that every call is a harmless no-op.
// If the handler drops its last reference without answering, the server answers 500.
class Exchange {
 public:
  virtual ~Exchange() = default;

  virtual const Request& request() const = 0;

  // Sends a whole response. Ignored if a response was already started.
  virtual void respond(Response response) = 0;

  // Starts a chunked response (Transfer-Encoding: chunked). content_type e.g. "text/event-stream".
  // Ignored if a response was already started.
  virtual void start_stream(int status, std::string content_type, HeaderList headers = {}) = 0;
  // Queues bytes to send as (part of) a chunk. Returns false when the stream is over (client gone,
  // finished, or the queue grew past the server's stream buffer limit, which also cancels).
  // Never blocks.
  virtual bool write(std::string data) = 0;
  // Ends the chunked response (last chunk). Idempotent.
  virtual void finish() = 0;

  virtual bool cancelled() const = 0;
  // Sets the callback run once on cancellation. If already cancelled, runs it now, on this thread.
  virtual void on_cancel(std::function<void()> callback) = 0;
};

using ExchangePtr = std::shared_ptr<Exchange>;

// Runs on an io thread: must not block (hand long work to another thread and answer later).
using Handler = std::function<void(const ExchangePtr&)>;

// Builds the body of an error the server itself generates (404, 405, 408, 413, 431, 400, 500),
// so a service can give them its own shape. The default is text/plain "<message>\n".
using ErrorRenderer = std::function<Response(int status, std::string_view message)>;

// Reason phrase for a status ("Not Found"); "Unknown" for codes it does not know.
const char* reason_phrase(int status);

// Percent-decodes a path segment; returns false on a malformed escape.
bool percent_decode(std::string_view in, std::string* out);

}  // namespace ts::http
