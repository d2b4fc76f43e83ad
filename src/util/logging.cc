// Copyright 2026 The Strata Authors.
#include "util/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>

namespace strata {
namespace {

std::shared_ptr<spdlog::logger> MakeLogger() {
  auto logger = spdlog::stderr_logger_mt("strata");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %^%l%$ strata: %v", spdlog::pattern_time_type::utc);
  const char* level = std::getenv("STRATA_LOG_LEVEL");
  logger->set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
  return logger;
}

}  // namespace

spdlog::logger* Log() {
  static std::shared_ptr<spdlog::logger> logger = MakeLogger();
  return logger.get();
}

bool SetLogLevel(const std::string& level) {
  auto l = spdlog::level::from_str(level);
  if (l == spdlog::level::off && level != "off") return false;
  Log()->set_level(l);
  return true;
}

void LogLimiter::Add() {
  MutexLock l(&mu_);
  ++events_;
}

bool LogLimiter::Due(std::chrono::steady_clock::duration every, uint64_t* count) {
  MutexLock l(&mu_);
  const auto now = std::chrono::steady_clock::now();
  *count = events_ - logged_;
  if (*count == 0 || (logged_ > 0 && now - logged_at_ < every)) return false;
  logged_ = events_;
  logged_at_ = now;
  return true;
}

}  // namespace strata
