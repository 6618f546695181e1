#include "frugal/server/request_log.h"

#include <cerrno>
#include <cstring>

#include "frugal/engine/timings_json.h"
#include "frugal/server/codec.h"

namespace frugal::server {

Result<std::unique_ptr<RequestLog>> RequestLog::open(const std::string& path, std::string model) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f) return error(ErrorCode::kIo, "--log-requests: cannot open '{}': {}", path, std::strerror(errno));
  return std::unique_ptr<RequestLog>(new RequestLog(f, std::move(model)));
}

RequestLog::~RequestLog() {
  if (file_) std::fclose(file_);
}

json RequestLog::record(const FinishedRequest& f, const std::string& model) {
  json j;
  j["time"] = rfc3339_now();
  j["id"] = f.request_id;
  j["api"] = f.api;
  j["model"] = model;
  j["finish_reason"] = finish_reason_name(f.reason);
  if (f.reason == FinishReason::kError) j["error"] = f.error.message();
  if (f.reason == FinishReason::kStop) j["stop"] = f.stop_string;
  j["prompt_tokens"] = f.prompt_tokens;
  j["generated_tokens"] = f.generated_tokens;
  j["seed"] = f.seed;
  j["timings"] = timings_json(f.timings);
  return j;
}

void RequestLog::write(const FinishedRequest& f) {
  const std::string line = dump(record(f, model_)) + "\n";
  std::lock_guard<std::mutex> lk(mu_);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace frugal::server
