// What the OpenAI service needs from an engine, as an interface so service tests can use a fake
// that produces scripted event streams (RequestHandle and its HandleState are public plain
// types). EngineBackend adapts the real engine::Engine. Thread-safe as the engine is.
#pragma once

#include <memory>

#include "core/status.h"
#include "engine/engine.h"
#include "engine/request.h"

namespace ts::server {

class Backend {
 public:
  virtual ~Backend() = default;
  // As Engine::submit: kInvalidArgument, kResourceExhausted, kUnavailable (queue full / draining).
  virtual Result<std::shared_ptr<engine::RequestHandle>> submit(engine::Request req) = 0;
  // Max prompt + completion tokens per request.
  virtual int32_t max_model_len() const = 0;
  // New submits fail with kUnavailable from now on.
  virtual void stop_accepting() = 0;
  virtual engine::EngineStats stats() const = 0;
};

class EngineBackend : public Backend {
 public:
  explicit EngineBackend(engine::Engine& engine) : engine_(engine) {}
  Result<std::shared_ptr<engine::RequestHandle>> submit(engine::Request req) override {
    return engine_.submit(std::move(req));
  }
  int32_t max_model_len() const override { return engine_.max_model_len(); }
  void stop_accepting() override { engine_.stop_accepting(); }
  engine::EngineStats stats() const override { return engine_.stats(); }

 private:
  engine::Engine& engine_;
};

}  // namespace ts::server
