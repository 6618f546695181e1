// Runs the real `frugal` binary for the CLI tests and checks how it fails.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace frugal {

struct CmdResult {
  int exit_code = -1;
  bool signaled = false;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// `frugal ARGS` with stdin empty; stdout and stderr captured.
inline CmdResult run_frugal(const std::string& args) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("frugal_cli_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string out = (dir / "stdout").string(), err = (dir / "stderr").string();
  const std::string cmd = std::string(FRUGAL_BINARY_DIR) + "/bin/frugal " + args + " >" + out + " 2>" + err + " </dev/null";
  const int st = std::system(cmd.c_str());
  CmdResult r;
  // /bin/sh reports a child killed by signal N as exit status 128 + N.
  r.signaled = WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) > 128);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  if (!s.empty() && s.back() != '\n') ++n;
  return n;
}

// Exit non-zero, not by a signal, with exactly one line on stderr that contains `needle`.
inline void expect_clean_failure(const CmdResult& r, const std::string& needle) {
  EXPECT_FALSE(r.signaled) << r.err;
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr should mention '" << needle << "': " << r.err;
}

}  // namespace frugal
