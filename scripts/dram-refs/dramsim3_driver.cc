// Presents a request stream to DRAMsim3 with dmalab's stream semantics (see
// crates/dmalab-sim/src/dramcheck.rs) and prints one JSON line of figures.
// Written for dmalab; links against a DRAMsim3 build (not part of dmalab).
//
// usage: dramsim3_driver CONFIG.ini OUTDIR STREAM GAP_CLOCKS SLOTS
#include <cstdint>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memory_system.h"

static uint64_t stat(const std::string& json, const std::string& key) {
  auto p = json.find("\"" + key + "\"");
  if (p == std::string::npos) return 0;
  p = json.find(':', p);
  return std::stoull(json.substr(p + 1));
}

int main(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: dramsim3_driver CONFIG.ini OUTDIR STREAM GAP_CLOCKS SLOTS\n";
    return 2;
  }
  std::vector<std::pair<bool, uint64_t>> reqs;
  std::ifstream in(argv[3]);
  std::string kind, addr;
  uint64_t nreads = 0;
  while (in >> kind >> addr) {
    bool w = kind == "W";
    reqs.emplace_back(w, std::stoull(addr, nullptr, 16));
    nreads += !w;
  }
  const uint64_t gap = std::stoull(argv[4]);
  const uint64_t slots = std::stoull(argv[5]);
  uint64_t clk = 0, outstanding = 0, reads_done = 0, last_data = 0, last_acc = 0;
  double lat_sum = 0;
  std::unordered_map<uint64_t, std::deque<uint64_t>> pending;
  auto rcb = [&](uint64_t a) {
    auto& d = pending[a];
    lat_sum += double(clk - d.front());
    d.pop_front();
    reads_done++;
    outstanding--;
    last_data = clk;
  };
  auto wcb = [](uint64_t) {};
  dramsim3::MemorySystem mem(argv[1], argv[2], rcb, wcb);
  size_t i = 0;
  uint64_t next = 0;
  while (i < reqs.size() || reads_done < nreads) {
    while (i < reqs.size() && clk >= next) {
      auto [w, a] = reqs[i];
      if (!w && outstanding >= slots) break;
      if (!mem.WillAcceptTransaction(a, w)) break;
      mem.AddTransaction(a, w);
      if (!w) {
        pending[a].push_back(clk);
        outstanding++;
      }
      last_acc = clk;
      i++;
      next = clk + gap;
    }
    mem.ClockTick();
    clk++;
  }
  mem.PrintStats();
  std::ifstream js(std::string(argv[2]) + "/dramsim3.json");
  std::stringstream ss;
  ss << js.rdbuf();
  const std::string j = ss.str();
  const double tck = mem.GetTCK();
  const uint64_t hits = stat(j, "num_read_row_hits") + stat(j, "num_write_row_hits");
  const uint64_t end = last_data > last_acc ? last_data : last_acc;
  std::printf(
      "{\"reads\":%llu,\"writes\":%llu,\"row_hits\":%llu,\"acts\":%llu,"
      "\"read_lat_mean_ns\":%.3f,\"total_ns\":%.3f,\"clocks\":%llu}\n",
      (unsigned long long)nreads, (unsigned long long)(reqs.size() - nreads),
      (unsigned long long)hits, (unsigned long long)stat(j, "num_act_cmds"),
      nreads ? lat_sum / nreads * tck : 0.0, double(end) * tck, (unsigned long long)clk);
  return 0;
}
