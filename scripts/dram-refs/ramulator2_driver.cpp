// Presents a request stream to Ramulator 2 with dmalab's stream semantics
// (see crates/dmalab-sim/src/dramcheck.rs) and prints one JSON line of
// figures. Written for dmalab; links against a Ramulator 2 build (not part
// of dmalab).
//
// usage: ramulator2_driver CONFIG.yaml STREAM GAP_CLOCKS SLOTS
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ramulator/base/config.h"
#include "ramulator/base/factory.h"
#include "ramulator/base/request.h"
#include "ramulator/frontend/i_frontend.h"
#include "ramulator/memory_system/i_memory_system.h"

static uint64_t stat(const std::string& text, const std::string& key) {
  auto p = text.find(" " + key + ":");
  if (p == std::string::npos) return 0;
  p = text.find(':', p);
  return std::stoull(text.substr(p + 1));
}

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: ramulator2_driver CONFIG.yaml STREAM GAP_CLOCKS SLOTS\n";
    return 2;
  }
  std::vector<std::pair<bool, uint64_t>> reqs;
  std::ifstream in(argv[2]);
  std::string kind, addr;
  uint64_t nreads = 0;
  while (in >> kind >> addr) {
    bool w = kind == "W";
    reqs.emplace_back(w, std::stoull(addr, nullptr, 16));
    nreads += !w;
  }
  const uint64_t gap = std::stoull(argv[3]);
  const uint64_t slots = std::stoull(argv[4]);
  auto config = Ramulator::Config::parse_config_file(argv[1]);
  auto* fe = Ramulator::Factory::create_frontend(config);
  auto* ms = Ramulator::Factory::create_memory_system(config);
  fe->connect_memory_system(ms);
  ms->connect_frontend(fe);
  const double tck = ms->get_tCK();

  uint64_t clk = 0, outstanding = 0, reads_done = 0, last_data = 0, last_acc = 0;
  double lat_sum = 0;
  size_t i = 0;
  uint64_t next = 0;
  while (i < reqs.size() || reads_done < nreads) {
    while (i < reqs.size() && clk >= next) {
      auto [w, a] = reqs[i];
      if (!w && outstanding >= slots) break;
      const uint64_t at = clk;
      bool ok = fe->receive_external_requests(
          w ? Ramulator::Request::Type::Write : Ramulator::Request::Type::Read, a, 0,
          // Ramulator 2 calls back for writes too, when their WR issues.
          [&, at, w](Ramulator::Request&) {
            if (w) return;
            lat_sum += double(clk - at);
            reads_done++;
            outstanding--;
            last_data = clk;
          },
          64);
      if (!ok) break;
      if (!w) outstanding++;
      last_acc = clk;
      i++;
      next = clk + gap;
    }
    ms->tick();
    clk++;
  }
  ms->update_stats_recursive();
  std::ostringstream ss;
  ms->print_stats(ss);
  const std::string s = ss.str();
  const uint64_t end = last_data > last_acc ? last_data : last_acc;
  std::printf(
      "{\"reads\":%llu,\"writes\":%llu,\"row_hits\":%llu,\"acts\":%llu,"
      "\"read_lat_mean_ns\":%.3f,\"total_ns\":%.3f,\"clocks\":%llu}\n",
      (unsigned long long)nreads, (unsigned long long)(reqs.size() - nreads),
      (unsigned long long)stat(s, "row_hits"),
      (unsigned long long)(stat(s, "row_misses") + stat(s, "row_conflicts")),
      nreads ? lat_sum / nreads * tck : 0.0, double(end) * tck, (unsigned long long)clk);
  return 0;
}
