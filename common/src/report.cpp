// Run report assembly, digests, and atomic writing.
#include "ddplab/report.h"

#include "ddplab/launch.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "ddplab/config.h"
#include "ddplab/data/generator.h"
#include "ddplab/data/shard.h"
#include "ddplab/error.h"
#include "ddplab/log.h"
#include "ddplab/memory.h"

namespace ddplab {

uint64_t SampleLedger::hash(uint64_t index) { return data::mix64(index ^ 0xA0761D6478BD642FULL); }

void SampleLedger::add(uint64_t index) {
  ++count_;
  set_ += hash(index);
  order_ = (order_ ^ hash(index)) * 0x100000001b3ULL;
  if (head_.size() < 16) head_.push_back(index);
  if (!seen_complete_) return;
  if (index >= kSeenCap) {
    seen_complete_ = false;
    seen_ = {};
    return;
  }
  if (index / 64 >= seen_.size()) seen_.resize(index / 64 + 1, 0);
  seen_[index / 64] |= uint64_t{1} << (index % 64);
}

namespace {
constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}  // namespace

std::string encode_seen(const std::vector<uint64_t>& words) {
  std::vector<uint8_t> bytes(words.size() * 8);
  for (size_t w = 0; w < words.size(); ++w) {
    for (int b = 0; b < 8; ++b) bytes[w * 8 + b] = static_cast<uint8_t>(words[w] >> (8 * b));
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{bytes[i]} << 16) | (i + 1 < bytes.size() ? uint32_t{bytes[i + 1]} << 8 : 0) |
                       (i + 2 < bytes.size() ? uint32_t{bytes[i + 2]} : 0);
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kBase64[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kBase64[v & 63] : '=';
  }
  return out;
}

std::vector<uint64_t> decode_seen(const std::string& text, const std::string& what) {
  auto bad = [&](const std::string& why) {
    return Error(fmt::format("{}: not a sample bitmap (base64 of 64-bit words): {}", what, why));
  };
  if (text.size() % 4 != 0) throw bad(fmt::format("length {} is not a multiple of 4", text.size()));
  std::vector<uint8_t> bytes;
  bytes.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      const char* at = c == '\0' ? nullptr : std::strchr(kBase64, c);
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      if (at == nullptr || pad > 0) throw bad(fmt::format("character {} ('{}')", i + k, c));
      v = (v << 6) | static_cast<uint32_t>(at - kBase64);
    }
    bytes.push_back(static_cast<uint8_t>(v >> 16));
    if (pad < 2) bytes.push_back(static_cast<uint8_t>(v >> 8));
    if (pad < 1) bytes.push_back(static_cast<uint8_t>(v));
  }
  if (bytes.size() % 8 != 0) throw bad(fmt::format("{} bytes is not a whole number of words", bytes.size()));
  std::vector<uint64_t> words(bytes.size() / 8, 0);
  for (size_t w = 0; w < words.size(); ++w) {
    for (int b = 0; b < 8; ++b) words[w] |= uint64_t{bytes[w * 8 + b]} << (8 * b);
  }
  return words;
}

void SampleLedger::add(const std::vector<uint64_t>& indices) {
  for (uint64_t i : indices) add(i);
}

uint64_t SampleLedger::range_set_digest(uint64_t first, uint64_t n) {
  uint64_t s = 0;
  for (uint64_t i = first; i < first + n; ++i) s += hash(i);
  return s;
}

void append_seen(const nlohmann::json& epoch, const std::string& what, std::vector<std::vector<uint64_t>>& out) {
  const auto it = epoch.find("seen");
  if (it != epoch.end() && it->is_string()) out.push_back(decode_seen(it->get<std::string>(), what));
}

EpochUnique epoch_unique_samples(const std::vector<uint64_t>& set_digests, const std::vector<uint64_t>& samples,
                                 uint64_t n, const std::vector<std::vector<uint64_t>>& seen) {
  EpochUnique u;
  uint64_t digest = 0, processed = 0, max_one = 0;
  bool replicated = !set_digests.empty();
  for (size_t k = 0; k < set_digests.size(); ++k) {
    digest += set_digests[k];
    processed += samples.at(k);
    max_one = std::max(max_one, samples.at(k));
    replicated = replicated && set_digests[k] == set_digests[0];
  }
  if (!set_digests.empty() && seen.size() == set_digests.size()) {
    const size_t words = (n + 63) / 64;
    std::vector<uint64_t> all(words, 0);
    for (const auto& s : seen) {
      for (size_t w = 0; w < std::min(words, s.size()); ++w) all[w] |= s[w];
    }
    if (n % 64 != 0 && words > 0) all[words - 1] &= (uint64_t{1} << (n % 64)) - 1;
    for (uint64_t w : all) u.unique += static_cast<uint64_t>(__builtin_popcountll(w));
    u.replicated = replicated && set_digests.size() > 1;
  } else if (digest == SampleLedger::range_set_digest(0, n)) {
    u.unique = n;
  } else if (replicated) {
    u.unique = max_one;
    u.replicated = set_digests.size() > 1;
  } else {
    u.unique = std::min<uint64_t>(processed, n);
    u.exact = false;
  }
  return u;
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

std::string parameter_digest(const torch::nn::Module& module) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto fold = [&h](const torch::Tensor& t) {
    const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    h = data::fnv1a64(c.data_ptr(), c.numel() * c.element_size(), h);
  };
  for (const auto& p : module.parameters()) fold(p);
  for (const auto& b : module.buffers()) fold(b);
  return hex64(h);
}

nlohmann::json parameter_digests_by_name(const torch::nn::Module& module) {
  nlohmann::json out = nlohmann::json::object();
  auto digest = [](const torch::Tensor& t) {
    const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    return hex64(data::fnv1a64(c.data_ptr(), c.numel() * c.element_size(), 0xcbf29ce484222325ULL));
  };
  for (const auto& p : module.named_parameters()) out[p.key()] = digest(p.value());
  for (const auto& b : module.named_buffers()) out[b.key()] = digest(b.value());
  return out;
}

uint64_t parse_hex64(const std::string& s, const std::string& what) {
  try {
    size_t used = 0;
    const uint64_t v = std::stoull(s, &used, 16);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error(fmt::format("{}: '{}' is not a hex digest", what, s));
}

void RunReport::verdict(const std::string& id, bool ok, const std::string& said, const nlohmann::json& figures,
                        bool every_rank) {
  const bool good_id = !id.empty() && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
  if (!good_id) throw Error(fmt::format("verdict id '{}': use lower-case letters, digits and '_'", id));
  j_["verdicts"][id] = {{"ok", ok}, {"said", said}, {"figures", figures}};
  const int rank = j_.value("rank", 0);
  if (!every_rank && rank != 0) return;
  const std::string who = every_rank ? fmt::format("rank {}: ", rank) : "";
  if (ok) {
    log::info("{}{}", who, said);
  } else {
    log::warn("{}{}", who, said);
  }
}

RunReport::RunReport(std::string lab, int rank, int world_size) {
  j_["schema"] = kReportSchema;
  j_["version"] = kReportVersion;
  j_["lab"] = std::move(lab);
  j_["rank"] = rank;
  j_["world_size"] = world_size;
  j_["status"] = "running";
  j_["build"] = {{"ddplab", DDPLAB_VERSION}, {"torch", TORCH_VERSION}, {"lab_tree", DDPLAB_LAB_TREE}};
  j_["steps"] = {{"epoch", nlohmann::json::array()}, {"loss", nlohmann::json::array()}};
  j_["epochs"] = nlohmann::json::array();
  j_["not_attempted"] = nlohmann::json::array();
}

void RunReport::set_config(const nlohmann::json& config) { j_["config"] = config; }

void RunReport::set_device(const std::string& device, int threads) {
  j_["device"] = device;
  j_["threads"] = threads;
  // The cores this rank may run on ("0-1"; "1" when ddplab launch bound it: DDPLAB_CPUS), so a
  // 1-rank and a 2-rank run can be compared on what each rank had.
  j_["cores"] = cpu_list(allowed_cpus());
}

void RunReport::set_status(const std::string& status, const std::string& message) {
  j_["status"] = status;
  if (!message.empty()) j_["message"] = message;
}

void RunReport::add_not_attempted(const std::string& exercise) {
  for (const auto& e : not_attempted_)
    if (e == exercise) return;
  not_attempted_.push_back(exercise);
  j_["not_attempted"] = not_attempted_;
}

void RunReport::add_step(int64_t epoch, double loss) {
  j_["steps"]["epoch"].push_back(epoch);
  j_["steps"]["loss"].push_back(loss);
}

void RunReport::add_epoch(int64_t epoch, int64_t steps, const SampleLedger& ledger, double seconds) {
  j_["epochs"].push_back({{"epoch", epoch},
                          {"steps", steps},
                          {"samples", ledger.count()},
                          {"set_digest", hex64(ledger.set_digest())},
                          {"order_digest", hex64(ledger.order_digest())},
                          {"head", ledger.head()},
                          {"seconds", seconds}});
  if (ledger.seen_complete()) j_["epochs"].back()["seen"] = encode_seen(ledger.seen());
}

void RunReport::set_phases(const StepTimer& timer) {
  nlohmann::json p;
  for (int i = 0; i < kNumPhases; ++i) p[phase_name(static_cast<Phase>(i))] = timer.total(static_cast<Phase>(i));
  p["compute"] = timer.compute();
  p["wall"] = timer.wall();
  p["steps"] = timer.steps();
  p["step_median"] = timer.steps() > 0 ? median(timer.step_seconds()) : 0.0;
  // Each phase's median over the steps: robust to the few steps a shared machine stalls, which a
  // total (or a mean) of a sub-millisecond phase cannot shrug off (the data_wait check reads it).
  nlohmann::json medians = nlohmann::json::object();
  if (timer.steps() > 0) {
    for (int i = 0; i < kNumPhases; ++i) {
      const auto phase = static_cast<Phase>(i);
      medians[phase_name(phase)] = median(timer.phase_per_step(phase));
    }
  }
  p["step_medians"] = medians;
  j_["phases"] = p;
}

void RunReport::set_samples(uint64_t processed, uint64_t unique) {
  j_["samples"] = {{"processed", processed}, {"unique", unique}};
}

void RunReport::set_params(const std::string& initial_digest, const std::string& final_digest, int64_t count) {
  j_["params"] = {{"initial_digest", initial_digest}, {"final_digest", final_digest}, {"count", count}};
}

void RunReport::set_eval(double auc, double logloss, uint64_t samples, double teacher_auc, double teacher_logloss) {
  j_["eval"] = {{"auc", auc},
                {"logloss", logloss},
                {"samples", samples},
                {"teacher_auc", teacher_auc},
                {"teacher_logloss", teacher_logloss}};
}

void RunReport::capture_memory() {
  j_["memory"] = {{"peak_rss_bytes", memory::peak_rss_bytes()},
                  {"cuda_peak_allocated_bytes", memory::cuda_peak_allocated_bytes()}};
}

void RunReport::write(const std::string& path) const { write_file_atomic(path, j_.dump(1) + "\n"); }

nlohmann::json RunReport::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("cannot open run report {}: {}", path, std::strerror(errno)));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(fmt::format("run report {} is not valid JSON at byte {}: {}", path, e.byte, e.what()));
  }
  if (!j.is_object() || j.value("schema", "") != kReportSchema) {
    throw Error(fmt::format("{} is not a ddplab run report (schema is not '{}')", path, kReportSchema));
  }
  if (j.value("version", 0) != kReportVersion) {
    throw Error(fmt::format("run report {} has version {}, this ddplab reads version {}", path, j.value("version", 0),
                            kReportVersion));
  }
  return j;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) throw Error(fmt::format("cannot write {}: {}", tmp, std::strerror(errno)));
  const bool ok =
      std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  std::fclose(f);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = ok ? errno : err;
    std::remove(tmp.c_str());
    throw Error(fmt::format("cannot write {}: {}", path, std::strerror(e)));
  }
}

}  // namespace ddplab
