// The per-rank timeline: recording into bounded buffers, the Chrome Trace Event JSON writer, and
// the merge of a job's rank files into one timeline.
#include "ddplab/trace.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "ddplab/error.h"

namespace ddplab {
// Defined in report.cpp; declared here because report.h includes LibTorch, which this file (and
// `ddplab trace merge`, which links it) does without.
void write_file_atomic(const std::string& path, const std::string& text);
}  // namespace ddplab

namespace ddplab::trace {
namespace {

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

/// Microseconds with nanosecond digits: what Chrome's format expects in ts and dur.
std::string micros(int64_t ns) { return fmt::format("{:.3f}", static_cast<double>(ns) / 1000.0); }

}  // namespace

Recorder::Recorder(int rank, int world_size, int64_t keep_steps)
    : rank_(rank), world_size_(world_size), keep_(keep_steps < 0 ? 0 : keep_steps), origin_(Clock::now()) {
  // Both clocks are read at the origin: steady_clock aligns ranks of one machine exactly (merge),
  // system_clock is all that relates two machines.
  origin_system_ns_ =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  // Capacity up front for the first steps (about 8 events a step), so recording them allocates
  // rarely; the ring's vectors are reused once they have grown.
  head_.reserve(static_cast<size_t>(std::min<int64_t>(keep_ == 0 ? 1024 : keep_, 4096)) * 8);
  ring_.resize(static_cast<size_t>(keep_));
  outside_.reserve(64);
}

std::vector<Recorder::Event>* Recorder::buffer() {
  if (in_step_) return (keep_ == 0 || steps_ < keep_) ? &head_ : &current_;
  if (outside_.size() < kMaxOutsideEvents) return &outside_;
  ++dropped_outside_;
  return nullptr;
}

void Recorder::begin_step(Clock::time_point start) {
  in_step_ = true;
  step_start_ = start;
  current_.clear();  // keeps its capacity
  step_mark_ = head_.size();
}

void Recorder::end_step(Clock::time_point end) {
  if (!in_step_) return;
  const int64_t s0 = since_origin(step_start_);
  buffer()->push_back(Event{nullptr, s0, since_origin(end) - s0, steps_, 0, 0, kStepsTid, Kind::kStep, false});
  if (keep_ != 0 && steps_ >= keep_) {
    // The finished step replaces the one keep_ steps before it; swapping hands that one's
    // capacity to the next step.
    std::swap(ring_[static_cast<size_t>(steps_ % keep_)], current_);
  }
  ++steps_;
  in_step_ = false;
}

void Recorder::cancel_step() {
  if (!in_step_) return;
  if (keep_ == 0 || steps_ < keep_) head_.resize(step_mark_);
  current_.clear();
  in_step_ = false;
}

void Recorder::phase(const char* name, Clock::time_point start, Clock::time_point end) {
  std::vector<Event>* b = buffer();
  if (b == nullptr) return;
  const int64_t s0 = since_origin(start);
  b->push_back(Event{name, s0, since_origin(end) - s0, in_step_ ? steps_ : -1, 0, 0, kStepsTid, Kind::kPhase, false});
}

int Recorder::begin_collective() {
  // The lowest lane with nothing in flight: a lane's events then never overlap, so every track
  // nests properly (chrome://tracing and Perfetto require it of complete events).
  for (int lane = 0; lane < kMaxLanes; ++lane) {
    const uint32_t bit = 1u << lane;
    if ((lanes_busy_ & bit) == 0) {
      lanes_busy_ |= bit;
      lanes_used_ = std::max(lanes_used_, lane + 1);
      return lane;
    }
  }
  return kMaxLanes - 1;  // more than kMaxLanes in flight: the last lane's bars overlap
}

void Recorder::collective(int lane, const char* op, Clock::time_point start, Clock::time_point end, int64_t bytes,
                          int64_t sequence, bool async) {
  if (lane >= 0 && lane < kMaxLanes) lanes_busy_ &= ~(1u << lane);
  std::vector<Event>* b = buffer();
  if (b == nullptr) return;
  const int64_t s0 = since_origin(start);
  b->push_back(Event{op, s0, since_origin(end) - s0, in_step_ ? steps_ : -1, bytes, sequence,
                     static_cast<int16_t>(kCollectivesTid + std::clamp(lane, 0, kMaxLanes - 1)), Kind::kCollective,
                     async});
}

std::string Recorder::to_json() const {
  std::vector<const Event*> events;
  events.reserve(head_.size() + outside_.size() + current_.size() + ring_.size() * 8);
  for (const auto& e : head_) events.push_back(&e);
  int64_t first_tail = steps_;
  if (keep_ != 0 && steps_ > keep_) {
    first_tail = std::max(keep_, steps_ - keep_);
    for (int64_t s = first_tail; s < steps_; ++s)
      for (const auto& e : ring_[static_cast<size_t>(s % keep_)]) events.push_back(&e);
  }
  if (in_step_) {
    for (const auto& e : current_) events.push_back(&e);  // the step a failure interrupted
  }
  for (const auto& e : outside_) events.push_back(&e);
  // By start, the enclosing event first when two start together, as the viewers nest them.
  std::stable_sort(events.begin(), events.end(), [](const Event* a, const Event* b) {
    return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->dur_ns > b->dur_ns;
  });

  auto meta_event = [&](const char* name, int tid, const std::string& args) {
    return fmt::format(R"({{"name":"{}","ph":"M","ts":0,"dur":0,"pid":{},"tid":{},"args":{}}})", name, rank_, tid,
                       args);
  };
  std::string out = "{\"traceEvents\":[\n";
  out += meta_event("process_name", kStepsTid, fmt::format(R"({{"name":"rank {}"}})", rank_)) + ",\n";
  out += meta_event("process_sort_index", kStepsTid, fmt::format(R"({{"sort_index":{}}})", rank_)) + ",\n";
  out += meta_event("thread_name", kStepsTid, R"({"name":"steps"})") + ",\n";
  for (int lane = 0; lane < std::max(lanes_used_, 1); ++lane) {
    const std::string name = lane == 0 ? "collectives" : fmt::format("collectives {}", lane + 1);
    out += meta_event("thread_name", kCollectivesTid + lane, fmt::format(R"({{"name":"{}"}})", name)) + ",\n";
  }
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = *events[i];
    const std::string common = fmt::format(R"("ph":"X","ts":{},"dur":{},"pid":{},"tid":{})", micros(e.start_ns),
                                           micros(e.dur_ns), rank_, e.tid);
    switch (e.kind) {
      case Kind::kStep:
        out += fmt::format(R"({{"name":"step {}","cat":"step",{},"args":{{"step":{}}}}})", e.step, common, e.step);
        break;
      case Kind::kPhase: out += fmt::format(R"({{"name":"{}","cat":"phase",{}}})", e.name, common); break;
      case Kind::kCollective:
        out += fmt::format(
            R"({{"name":"{}","cat":"collective",{},"args":{{"op":"{}","bytes":{},"seq":{},"async":{},"step":{}}}}})",
            e.name, common, e.name, e.bytes, e.sequence, e.async ? "true" : "false", e.step);
        break;
    }
    out += i + 1 < events.size() ? ",\n" : "\n";
  }
  // The last comma above belongs to the metadata events when there are no others.
  if (events.empty()) out.erase(out.size() - 2, 1);

  nlohmann::json kept = nlohmann::json::array();
  const int64_t head_end = keep_ == 0 ? steps_ : std::min(keep_, steps_);
  if (head_end > 0) kept.push_back({0, head_end});
  if (first_tail < steps_) kept.push_back({first_tail, steps_});
  nlohmann::json other = meta_;
  other["schema"] = kTraceSchema;
  other["version"] = kTraceVersion;
  other["rank"] = rank_;
  other["world_size"] = world_size_;
  other["host"] = host_name();
  other["boot_id"] = read_first_line("/proc/sys/kernel/random/boot_id");
  other["os_pid"] = static_cast<int64_t>(::getpid());
  other["origin_steady_ns"] = std::chrono::duration_cast<std::chrono::nanoseconds>(origin_.time_since_epoch()).count();
  other["origin_system_ns"] = origin_system_ns_;
  other["trace_steps"] = keep_;
  other["steps_total"] = steps_;
  other["steps_kept"] = kept;  // [first, end) ranges of step numbers
  other["dropped_outside_events"] = dropped_outside_;
  out += "],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":" + other.dump() + "\n}\n";
  return out;
}

void Recorder::write(const std::string& path) const { write_file_atomic(path, to_json()); }

void write_atomic(const std::string& path, const std::string& text) { write_file_atomic(path, text); }

std::string dump(const nlohmann::json& doc) {
  std::string out = "{\"traceEvents\":[\n";
  const auto& events = doc.at("traceEvents");
  for (size_t i = 0; i < events.size(); ++i) out += events[i].dump() + (i + 1 < events.size() ? ",\n" : "\n");
  out += "],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":" + doc.value("otherData", nlohmann::json::object()).dump() +
         "\n}\n";
  return out;
}

nlohmann::json load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read trace {}", path));
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(fmt::format("trace {} is not valid JSON at byte {}: {}", path, e.byte, e.what()));
  }
  const auto& other = j.is_object() ? j.value("otherData", nlohmann::json::object()) : nlohmann::json();
  if (!other.is_object() || other.value("schema", "") != kTraceSchema || !j.contains("traceEvents") ||
      !j["traceEvents"].is_array()) {
    throw Error(fmt::format("{} is not a ddplab trace (otherData.schema is not '{}')", path, kTraceSchema));
  }
  if (other.value("version", 0) != kTraceVersion) {
    throw Error(fmt::format("trace {} has version {}, this ddplab reads version {}", path, other.value("version", 0),
                            kTraceVersion));
  }
  if (!other.contains("rank") || !other.contains("origin_steady_ns") || !other.contains("origin_system_ns")) {
    throw Error(fmt::format("trace {} is not one rank's trace (no rank or origin in otherData; a merged file?)", path));
  }
  return j;
}

MergeResult merge(const std::vector<MergeInput>& inputs) {
  DDPLAB_CHECK(!inputs.empty(), "trace merge: no input files");
  // One boot of one kernel: CLOCK_MONOTONIC (steady_clock) is the same clock in every process,
  // containers included, so origins subtract exactly.
  bool one_clock = true;
  const std::string boot = inputs.front().doc["otherData"].value("boot_id", "");
  std::map<int64_t, std::string> seen;
  for (const auto& in : inputs) {
    const auto& o = in.doc["otherData"];
    if (boot.empty() || o.value("boot_id", "") != boot) one_clock = false;
    const int64_t rank = o["rank"].get<int64_t>();
    const auto [it, fresh] = seen.emplace(rank, in.path);
    if (!fresh) throw Error(fmt::format("trace merge: {} and {} both hold rank {}", it->second, in.path, rank));
  }
  MergeResult r;
  r.alignment = one_clock ? "steady_clock" : "system_clock";
  const char* key = one_clock ? "origin_steady_ns" : "origin_system_ns";
  int64_t earliest = inputs.front().doc["otherData"][key].get<int64_t>();
  for (const auto& in : inputs) earliest = std::min(earliest, in.doc["otherData"][key].get<int64_t>());

  std::vector<nlohmann::json> meta, events;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& in : inputs) {
    const auto& o = in.doc["otherData"];
    const double shift = static_cast<double>(o[key].get<int64_t>() - earliest) / 1000.0;
    r.shift_us.push_back(shift);
    ranks.push_back({{"rank", o["rank"]},
                     {"file", in.path},
                     {"host", o.value("host", "")},
                     {"shift_us", shift},
                     {"steps_kept", o.value("steps_kept", nlohmann::json::array())}});
    for (const auto& e : in.doc["traceEvents"]) {
      if (e.value("ph", "") == "M") {
        meta.push_back(e);
        continue;
      }
      nlohmann::json moved = e;
      // Rounded to the nanosecond again, so the sum does not print binary noise.
      moved["ts"] = std::round((e.value("ts", 0.0) + shift) * 1000.0) / 1000.0;
      events.push_back(std::move(moved));
    }
  }
  std::stable_sort(meta.begin(), meta.end(),
                   [](const auto& a, const auto& b) { return a.value("pid", 0) < b.value("pid", 0); });
  std::stable_sort(events.begin(), events.end(), [](const auto& a, const auto& b) {
    const double ta = a.value("ts", 0.0), tb = b.value("ts", 0.0);
    return ta != tb ? ta < tb : a.value("dur", 0.0) > b.value("dur", 0.0);
  });
  nlohmann::json all = nlohmann::json::array();
  for (auto& e : meta) all.push_back(std::move(e));
  for (auto& e : events) all.push_back(std::move(e));
  r.doc = {{"traceEvents", std::move(all)},
           {"displayTimeUnit", "ms"},
           {"otherData",
            {{"schema", kTraceSchema},
             {"version", kTraceVersion},
             {"merged", true},
             {"alignment", r.alignment},
             {"ranks", ranks}}}};
  return r;
}

}  // namespace ddplab::trace
