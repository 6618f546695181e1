// --log-requests FILE: one JSON line per finished request, with the phase timings in the schema
// `frugal run --json` uses (engine/timings_json.h).
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

#include "frugal/engine/request.h"
#include "frugal/server/api.h"

namespace frugal::server {

class RequestLog {
 public:
  // Appends to `path`; kIo when it cannot be opened.
  static Result<std::unique_ptr<RequestLog>> open(const std::string& path, std::string model);
  ~RequestLog();
  void write(const FinishedRequest& f);  // thread-safe, flushed per line

  // The line for one request (without the newline).
  static json record(const FinishedRequest& f, const std::string& model);

 private:
  RequestLog(std::FILE* f, std::string model) : file_(f), model_(std::move(model)) {}
  std::mutex mu_;
  std::FILE* file_;
  std::string model_;
};

}  // namespace frugal::server
