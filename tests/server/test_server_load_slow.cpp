// Labelled slow: the load test, 1000 requests from 16 concurrent clients (mixed sizes,
// some streamed, some cancelled midway), 0 failed, and the resident set after the run within 5%
// of the resident set after a warm-up of the same mix (no leak per request).
#include <cstdio>

#include "load_driver.h"
#include "server/server.h"

namespace fluxrt::test {
namespace {

size_t rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return size_t(resident) * size_t(sysconf(_SC_PAGESIZE));
}

TEST(ServerLoadSlow, ThousandRequestsSixteenClientsRssFlat) {
  server::ServerOptions o = demo_options();
  o.max_queue = 32;
  auto s = start_server(o);
  const LoadResult warm = run_load(s->port(), 200, 16, 2);
  EXPECT_EQ(warm.failed, 0);
  const size_t rss_warm = rss_bytes();
  const LoadResult r = run_load(s->port(), 1000, 16, 2);
  const size_t rss_after = rss_bytes();
  std::printf(
      "load: %d ok, %d cancelled, %d failed in %.1f s (%.1f requests/s); latency p50 %.3f s, p99 %.3f s; "
      "RSS after warm-up %.1f MiB, after the run %.1f MiB (%+.1f%%)\n",
      r.ok, r.cancelled, r.failed, r.wall_s, (r.ok + r.cancelled) / r.wall_s, r.percentile(0.5),
      r.percentile(0.99), rss_warm / 1048576.0, rss_after / 1048576.0,
      100.0 * (double(rss_after) - double(rss_warm)) / double(rss_warm));
  for (const std::string& f : r.failures) ADD_FAILURE() << f;
  EXPECT_EQ(r.failed, 0);
  EXPECT_EQ(r.ok + r.cancelled, 1000);
  EXPECT_LE(double(rss_after), 1.05 * double(rss_warm));
}

}  // namespace
}  // namespace fluxrt::test
