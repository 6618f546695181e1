// The server's listening socket takes a burst of connections: 64 clients connecting while nothing
// accepts yet (bind() without run(), as at the instant a burst arrives faster than the accept
// loop) all complete their handshake. With the backlog of 5 Debian's cpp-httplib listens with,
// only about 6 would, and a real burst of streaming clients saw connections reset.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "frugal/engine/engine.h"
#include "frugal/server/http_server.h"
#include "frugal/tokenize/tokenizer.h"
#include "server/test_model.h"

namespace frugal {
namespace {

using namespace std::chrono_literals;

// Connections to 127.0.0.1:port started at once; how many finished the handshake within ~2 s.
int completed_connections(int port, int n, std::vector<int>& fds) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    (void)::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
    fds.push_back(fd);
  }
  int done = 0;
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  std::vector<char> ok(fds.size(), 0);
  while (done < static_cast<int>(fds.size()) && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (ok[i]) continue;
      pollfd p{fds[i], POLLOUT, 0};
      if (::poll(&p, 1, 0) == 1 && (p.revents & POLLOUT)) {
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0) {
          ok[i] = 1;
          ++done;
        }
      }
    }
    ::usleep(10000);
  }
  return done;
}

TEST(HttpListen, ABurstOfConnectionsIsQueuedNotDropped) {
  auto m = Model::load(testing::tiny_chat_model_path());
  ASSERT_TRUE(m.ok()) << m.status().message();
  auto tok = Tokenizer::from_gguf((*m)->gguf());
  ASSERT_TRUE(tok.ok());
  auto backend = make_cpu_backend(CpuBackendOptions{1});
  EngineOptions eo;
  eo.n_parallel = 1;
  eo.n_ctx = 64;
  eo.telemetry_period_s = 0;
  auto engine = Engine::create(**m, **tok, *backend, eo);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  server::ServedModel served(**m, **tok, "tiny", testing::tiny_chat_model_path(), 64);
  server::Metrics metrics("tiny");
  server::ServerOptions so;
  so.port = 0;
  server::HttpServer srv(**engine, served, metrics, so);
  ASSERT_TRUE(srv.bind().ok());
  std::vector<int> fds;
  const int done = completed_connections(srv.port(), 64, fds);
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(done, 64) << "connections completed while the accept loop had not started";
}

}  // namespace
}  // namespace frugal
