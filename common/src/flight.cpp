#include "ddplab/flight.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ddplab/error.h"
#include "ddplab/report.h"

namespace ddplab::flight {
namespace fs = std::filesystem;
using nlohmann::json;

const char* state_name(State s) {
  switch (s) {
    case State::kEnqueued: return "enqueued";
    case State::kCompleted: return "completed";
    case State::kFailed: return "failed";
  }
  return "?";
}

std::string describe(const Entry& e) {
  return fmt::format("{} {}[{}]", dist::op_name(e.op), e.dtype, fmt::join(e.shape, ","));
}

namespace {

dist::Op op_from_name(const std::string& name, const std::string& where) {
  for (int i = 0; i < dist::kNumOps; ++i) {
    if (name == dist::op_name(static_cast<dist::Op>(i))) return static_cast<dist::Op>(i);
  }
  throw Error(fmt::format("{}: unknown collective '{}'", where, name));
}

State state_from_name(const std::string& name, const std::string& where) {
  for (State s : {State::kEnqueued, State::kCompleted, State::kFailed}) {
    if (name == state_name(s)) return s;
  }
  throw Error(fmt::format("{}: unknown state '{}' (enqueued, completed or failed)", where, name));
}

/// The entry of collective #seq in a dump, or nullptr.
const Entry* find(const Dump& d, int64_t seq) {
  for (const auto& e : d.entries) {
    if (e.seq == seq) return &e;
  }
  return nullptr;
}

/// The first collective the rank did not complete, else one past the last it recorded.
int64_t position(const Dump& d) {
  int64_t last = -1;
  for (const auto& e : d.entries) {
    if (e.state != State::kCompleted) return e.seq;
    last = std::max(last, e.seq);
  }
  return last + 1;
}

bool same_call(const Entry& a, const Entry& b) { return a.op == b.op && a.shape == b.shape && a.dtype == b.dtype; }

}  // namespace

json to_json(const Dump& d) {
  json entries = json::array();
  for (const auto& e : d.entries) {
    entries.push_back({{"seq", e.seq},
                       {"op", dist::op_name(e.op)},
                       {"shape", e.shape},
                       {"dtype", e.dtype},
                       {"enqueued_s", e.enqueued_s},
                       {"ended_s", e.ended_s},
                       {"state", state_name(e.state)}});
  }
  return {{"schema", "ddplab.flight"}, {"version", 1},           {"rank", d.rank},    {"world", d.world},
          {"reason", d.reason},        {"dumped_s", d.dumped_s}, {"entries", entries}};
}

Dump from_json(const json& j, const std::string& where) {
  try {
    if (j.value("schema", std::string()) != "ddplab.flight") {
      throw Error(fmt::format("{}: not a flight recorder dump (schema is not \"ddplab.flight\")", where));
    }
    Dump d;
    d.rank = j.at("rank").get<int>();
    d.world = j.at("world").get<int>();
    d.reason = j.value("reason", std::string());
    d.dumped_s = j.value("dumped_s", 0.0);
    size_t k = 0;
    for (const auto& e : j.at("entries")) {
      const std::string at = fmt::format("{}: entries[{}]", where, k++);
      Entry x;
      x.seq = e.at("seq").get<int64_t>();
      x.op = op_from_name(e.at("op").get<std::string>(), at);
      x.shape = e.at("shape").get<std::vector<int64_t>>();
      x.dtype = e.at("dtype").get<std::string>();
      x.enqueued_s = e.at("enqueued_s").get<double>();
      x.ended_s = e.at("ended_s").get<double>();
      x.state = state_from_name(e.at("state").get<std::string>(), at);
      d.entries.push_back(std::move(x));
    }
    return d;
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: malformed flight recorder dump: {}", where, e.what()));
  }
}

std::string dump_path(const std::string& dir, int rank) {
  return (fs::path(dir) / fmt::format("rank{}.json", rank)).string();
}

void write_dump(const std::string& dir, const Dump& d) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  write_file_atomic(dump_path(dir, d.rank), to_json(d).dump(1) + "\n");
}

std::vector<std::optional<Dump>> read_dumps(const std::string& dir, int world) {
  std::map<int, Dump> found;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    if (name.rfind("rank", 0) != 0 || f.path().extension() != ".json") continue;
    std::ifstream in(f.path());
    json j;
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      throw Error(fmt::format("{}: not JSON: {}", f.path().string(), e.what()));
    }
    Dump d = from_json(j, f.path().string());
    found[d.rank] = std::move(d);
  }
  if (ec) throw Error(fmt::format("{}: cannot list the folder: {}", dir, ec.message()));
  if (found.empty()) throw Error(fmt::format("{}: no flight recorder dump (rank<R>.json) in it", dir));
  if (world <= 0) world = found.begin()->second.world;
  std::vector<std::optional<Dump>> out(static_cast<size_t>(world));
  for (auto& [rank, d] : found) {
    if (rank >= 0 && rank < world) out[static_cast<size_t>(rank)] = std::move(d);
  }
  return out;
}

Stall diagnose(const std::vector<std::optional<Dump>>& dumps) {
  Stall s;
  const int world = static_cast<int>(dumps.size());
  // The earliest collective two ranks recorded differently.
  int64_t mismatch = -1;
  std::set<int64_t> seqs;
  for (const auto& d : dumps) {
    if (!d) continue;
    for (const auto& e : d->entries) seqs.insert(e.seq);
  }
  for (int64_t k : seqs) {
    const Entry* first = nullptr;
    for (const auto& d : dumps) {
      const Entry* e = d ? find(*d, k) : nullptr;
      if (e == nullptr) continue;
      if (first == nullptr) {
        first = e;
      } else if (!same_call(*first, *e)) {
        mismatch = k;
        break;
      }
    }
    if (mismatch >= 0) break;
  }
  // Where each rank is, and the lowest place a rank waits.
  int64_t lowest_wait = -1;
  for (const auto& d : dumps) {
    if (!d) continue;
    for (const auto& e : d->entries) {
      if (e.state != State::kCompleted) {
        lowest_wait = lowest_wait < 0 ? e.seq : std::min(lowest_wait, e.seq);
        break;
      }
    }
  }
  std::vector<int> no_dump;
  for (int r = 0; r < world; ++r) {
    if (!dumps[static_cast<size_t>(r)]) no_dump.push_back(r);
  }
  if (mismatch >= 0 && (lowest_wait < 0 || mismatch <= lowest_wait)) {
    s.seq = mismatch;
    s.cause = "mismatch";
    // The calls as each rank issued them; the ranks of the most common call wait for the others.
    std::map<std::string, std::vector<int>> by_call;
    std::vector<std::string> parts;
    for (int r = 0; r < world; ++r) {
      const auto& d = dumps[static_cast<size_t>(r)];
      const Entry* e = d ? find(*d, mismatch) : nullptr;
      const std::string what = e ? describe(*e) : (d ? "nothing recorded" : "no dump");
      by_call[what].push_back(r);
      parts.push_back(fmt::format("rank {} {}", r, what));
    }
    size_t most = 0;
    for (const auto& [call, ranks] : by_call) most = std::max(most, ranks.size());
    bool unique_majority =
        std::count_if(by_call.begin(), by_call.end(), [&](const auto& kv) { return kv.second.size() == most; }) == 1;
    for (const auto& [call, ranks] : by_call) {
      auto& into = (unique_majority && ranks.size() == most) ? s.waiting : s.holding;
      into.insert(into.end(), ranks.begin(), ranks.end());
    }
    std::sort(s.waiting.begin(), s.waiting.end());
    std::sort(s.holding.begin(), s.holding.end());
    s.said = fmt::format("the ranks issued different collectives as #{}: {}", mismatch, fmt::join(parts, "; "));
    return s;
  }
  if (lowest_wait < 0) {
    if (!no_dump.empty()) {
      s.said =
          fmt::format("no rank that dumped waits in a collective; rank(s) {} left no dump", fmt::join(no_dump, ", "));
    } else {
      s.said = "every rank completed every collective it recorded: no stall in the dumps";
    }
    return s;
  }
  s.seq = lowest_wait;
  std::vector<std::string> where;
  for (int r = 0; r < world; ++r) {
    const auto& d = dumps[static_cast<size_t>(r)];
    if (!d) {
      s.holding.push_back(r);
      where.push_back(fmt::format("rank {} left no dump (dead or frozen)", r));
      continue;
    }
    const Entry* e = find(*d, lowest_wait);
    if (e != nullptr && e->state != State::kCompleted) {
      s.waiting.push_back(r);
      where.push_back(fmt::format("rank {} waits in {} ({})", r, describe(*e), state_name(e->state)));
    } else if (e == nullptr && position(*d) <= lowest_wait) {
      s.holding.push_back(r);
      const int64_t last = position(*d) - 1;
      const Entry* l = find(*d, last);
      where.push_back(l ? fmt::format("rank {} never entered it: its last is #{} {} ({})", r, last, describe(*l),
                                      state_name(l->state))
                        : fmt::format("rank {} never entered it: it recorded no collective", r));
    } else {
      where.push_back(fmt::format("rank {} is past it (at #{})", r, position(*d)));
    }
  }
  const bool only_dead = !s.holding.empty() && std::all_of(s.holding.begin(), s.holding.end(),
                                                           [&](int r) { return !dumps[static_cast<size_t>(r)]; });
  s.cause = only_dead ? "no dump" : "not entered";
  s.said =
      fmt::format("collective #{} did not complete: {}; rank(s) {} hold it up", lowest_wait, fmt::join(where, "; "),
                  s.holding.empty() ? std::string("none of the dumped")
                                    : fmt::format("{}", fmt::join(s.holding, ", ")));
  return s;
}

std::string table(const std::vector<std::optional<Dump>>& dumps, const Stall& stall, int rows) {
  std::set<int64_t> seqs;
  for (const auto& d : dumps) {
    if (!d) continue;
    for (const auto& e : d->entries) seqs.insert(e.seq);
  }
  std::vector<int64_t> shown;
  for (auto it = seqs.rbegin(); it != seqs.rend(); ++it) {
    if (stall.seq >= 0 && *it > stall.seq + 1) continue;
    shown.push_back(*it);
    if (static_cast<int>(shown.size()) >= rows) break;
  }
  std::reverse(shown.begin(), shown.end());
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> head = {"#"};
  for (size_t r = 0; r < dumps.size(); ++r) head.push_back(fmt::format("rank {}", r));
  cells.push_back(head);
  for (int64_t k : shown) {
    std::vector<std::string> row = {fmt::format("{}{}", k, k == stall.seq ? " <" : "")};
    for (const auto& d : dumps) {
      const Entry* e = d ? find(*d, k) : nullptr;
      row.push_back(!d ? "(no dump)" : e ? fmt::format("{} {}", describe(*e), state_name(e->state)) : "-");
    }
    cells.push_back(row);
  }
  std::vector<size_t> width(head.size(), 0);
  for (const auto& row : cells) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : cells) {
    for (size_t c = 0; c < row.size(); ++c) out += fmt::format("{:<{}}  ", row[c], width[c]);
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
  }
  out += stall.said + "\n";
  return out;
}

}  // namespace ddplab::flight
