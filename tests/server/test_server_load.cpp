// The default suite's load test: 100 one-step requests from 16 concurrent clients (mixed sizes, some
// streamed, some cancelled midway) against one server: none fails, the server still answers,
// and nothing is left queued or running. The 1000-request version with the memory check is
// test_server_load_slow.
#include <cstdio>
#include <sstream>

#include "load_driver.h"

namespace fluxrt::test {
namespace {

TEST(ServerLoad, HundredRequestsSixteenClientsNoFailure) {
  server::ServerOptions o = demo_options();
  o.max_queue = 32;
  auto s = start_server(o);
  const LoadResult r = run_load(s->port(), 100, 16, 1);
  std::printf("load: %d ok, %d cancelled, %d failed in %.1f s; latency p50 %.3f s, p99 %.3f s\n", r.ok,
              r.cancelled, r.failed, r.wall_s, r.percentile(0.5), r.percentile(0.99));
  std::printf("slowest non-streamed: %.3f s; server: %s\n", r.slowest_s, r.slowest_server_timing.c_str());
  for (const std::string& f : r.failures) ADD_FAILURE() << f;
  EXPECT_EQ(r.failed, 0);
  EXPECT_EQ(r.ok + r.cancelled, 100);
  auto c = client_for(s->port());
  EXPECT_EQ(c->Get("/health")->status, 200);
  // A cancelled request queued after the last answered one may still be in the queue when that
  // answer arrives, until its handler notices the closed connection: the queue empties, then.
  EXPECT_TRUE(wait_for_metric(*c, "fluxrt_queue_depth", [](double v) { return v == 0; }));
  EXPECT_TRUE(wait_for_metric(*c, "fluxrt_running_requests", [](double v) { return v == 0; }));
}

// cpp-httplib 0.11 listens with a backlog of 5; a burst of connections beyond it lost handshakes
// (clients waited for SYN retries, or got no answer) under load. The kernel's listen queue length
// is what `ss` shows as Send-Q of a listening socket.
TEST(ServerLoad, ListenBacklogIsTheSystemsLimit) {
  auto s = start_server(demo_options());
  const std::string command = "ss -Hltn 'sport = :" + std::to_string(s->port()) + "' 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char line[512] = {};
  const bool read = std::fgets(line, sizeof line, pipe) != nullptr;
  pclose(pipe);
  if (!read) GTEST_SKIP() << "ss (iproute2) is not installed";
  std::istringstream fields(line);
  std::string state;
  long recv_q = -1, backlog = -1;
  fields >> state >> recv_q >> backlog;
  EXPECT_EQ(state, "LISTEN") << line;
  EXPECT_GE(backlog, 128) << line;
}

}  // namespace
}  // namespace fluxrt::test
