// Lab 09 exercises: the checkpoint a job resumes from (09.1 writes it, 09.2 reads it back or
// refuses it) and the cost meter with its budget alarm (09.3). Contracts: lab09.h. Edit only
// between the BEGIN/END STUDENT CODE markers; the grader takes only this file.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "lab09.h"

#include "ddplab/error.h"

namespace lab09 {

void save_checkpoint([[maybe_unused]] const std::string& path, [[maybe_unused]] const Checkpoint& c,
                     [[maybe_unused]] const torch::nn::Module& model,
                     [[maybe_unused]] const torch::optim::Optimizer& optimizer) {
  // BEGIN STUDENT CODE (09.1: a checkpoint written so that no reader ever sees part of one)
  namespace fs = std::filesystem;
  // fsync(2) of a file or a folder; false (errno set) if it could not be opened or synced.
  const auto sync_path = [](const fs::path& p) {
    const int fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) return false;
    const bool ok = ::fsync(fd) == 0;
    ::close(fd);
    return ok;
  };
  // The first line of a LibTorch error, without its C++ backtrace.
  const auto first_line = [](const std::exception& e) {
    const std::string m = e.what();
    return m.substr(0, m.find('\n'));
  };
  torch::serialize::OutputArchive archive, model_archive, optimizer_archive;
  const nlohmann::json header = {{"format", kCheckpointFormat},
                                 {"job", c.job},
                                 {"at", c.at},
                                 {"digest", tensors_digest(model_tensors(model))}};
  archive.write("header", c10::IValue(header.dump()));
  model.save(model_archive);
  optimizer.save(optimizer_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("rng", c.rng.defined() ? c.rng : rng_state());
  const fs::path target = fs::absolute(path);
  // In the same folder (rename(2) is atomic only within one file system), named so that a reader
  // looking for checkpoints does not take it for one, and unique to this process.
  const fs::path tmp = target.parent_path() / fmt::format(".{}.tmp-{}", target.filename().string(), ::getpid());
  try {
    archive.save_to(tmp.string());
    if (!sync_path(tmp)) throw ddplab::Error(fmt::format("fsync: {}", std::strerror(errno)));
    fs::rename(tmp, target);
    sync_path(target.parent_path());  // the rename itself reaches the disk
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw ddplab::Error(fmt::format("{}: cannot write the checkpoint: {}", path, first_line(e)));
  }
  // END STUDENT CODE
}

Checkpoint load_checkpoint([[maybe_unused]] const std::string& path, [[maybe_unused]] const JobIdentity& expected,
                           [[maybe_unused]] torch::nn::Module& model,
                           [[maybe_unused]] torch::optim::Optimizer& optimizer) {
  // BEGIN STUDENT CODE (09.2: read a checkpoint back, or refuse it and change nothing)
  namespace fs = std::filesystem;
  const auto first_line = [](const std::exception& e) {
    const std::string m = e.what();
    return m.substr(0, m.find('\n'));
  };
  const auto shape_text = [](const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); };
  // What differs between the checkpoint's job and this one, or "" when nothing does.
  const auto difference = [&](const JobIdentity& saved, const JobIdentity& job) -> std::string {
    if (saved.world_size != job.world_size) {
      return fmt::format(
          "written by a job of world size {}; this job has {}: resuming at another world size is not supported "
          "(its sampler position counts global batches of {} x {} samples)",
          saved.world_size, job.world_size, saved.world_size, saved.batch * saved.accumulate);
    }
    if (saved.batch != job.batch) {
      return fmt::format("batch {} per rank in the checkpoint, {} here", saved.batch, job.batch);
    }
    if (saved.accumulate != job.accumulate) {
      return fmt::format("{} micro-batch(es) per step in the checkpoint, {} here", saved.accumulate, job.accumulate);
    }
    if (saved.seed != job.seed) return fmt::format("seed {} in the checkpoint, {} here", saved.seed, job.seed);
    if (saved.train_samples != job.train_samples) {
      return fmt::format("{} training samples in the checkpoint, {} here", saved.train_samples, job.train_samples);
    }
    const size_t n = std::min(saved.model.size(), job.model.size());
    for (size_t i = 0; i < n; ++i) {
      if (saved.model[i] != job.model[i]) {
        return fmt::format("another model: tensor {} is {} {} in the checkpoint, {} {} here", i, saved.model[i].name,
                           shape_text(saved.model[i].shape), job.model[i].name, shape_text(job.model[i].shape));
      }
    }
    if (saved.model.size() != job.model.size()) {
      return fmt::format("another model: {} tensors in the checkpoint, {} here", saved.model.size(), job.model.size());
    }
    return "";
  };
  if (!fs::is_regular_file(path)) throw CheckpointError(fmt::format("{}: no such checkpoint", path));
  torch::serialize::InputArchive archive;
  c10::IValue header_value;
  try {
    archive.load_from(path);
    archive.read("header", header_value);
  } catch (const std::exception& e) {
    throw CheckpointError(fmt::format("{}: not a readable checkpoint (truncated or corrupt): {}", path, first_line(e)));
  }
  Checkpoint c;
  try {
    const auto header = nlohmann::json::parse(header_value.toStringRef());
    if (header.at("format") != kCheckpointFormat) throw std::runtime_error("format " + header.at("format").dump());
    c.job = header.at("job").get<JobIdentity>();
    c.at = header.at("at").get<Position>();
    c.digest = header.at("digest").get<std::string>();
  } catch (const std::exception& e) {
    throw CheckpointError(fmt::format("{}: not a lab 09 checkpoint (its header: {})", path, e.what()));
  }
  if (const std::string d = difference(c.job, expected); !d.empty()) {
    throw CheckpointError(fmt::format("{}: {}", path, d));
  }
  // Load into the model only after a copy of what it holds now, so a corrupt file changes nothing.
  std::vector<torch::Tensor> before;
  for (const auto& t : model_tensors(model)) before.push_back(t.detach().clone());
  auto restore = [&] {
    torch::NoGradGuard no_grad;
    const auto now = model_tensors(model);
    for (size_t i = 0; i < now.size(); ++i) now[i].set_(before[i]);
  };
  try {
    torch::serialize::InputArchive model_archive, optimizer_archive;
    archive.read("model", model_archive);
    model.load(model_archive);
    if (const std::string got = tensors_digest(model_tensors(model)); got != c.digest) {
      throw CheckpointError(
          fmt::format("{}: corrupt: its tensors' digest is {}, the one saved with them {}", path, got, c.digest));
    }
    archive.read("optimizer", optimizer_archive);
    archive.read("rng", c.rng);
    optimizer.load(optimizer_archive);
  } catch (const CheckpointError&) {
    restore();
    throw;
  } catch (const std::exception& e) {
    restore();
    throw CheckpointError(fmt::format("{}: not a readable checkpoint: {}", path, first_line(e)));
  }
  return c;
  // END STUDENT CODE
}

Spend meter([[maybe_unused]] const Price& price, [[maybe_unused]] const Position& at,
            [[maybe_unused]] uint64_t samples_per_epoch, [[maybe_unused]] int64_t epochs) {
  // BEGIN STUDENT CODE (09.3: what the job has cost and will cost)
  Spend s;
  s.device_hours = at.device_seconds / 3600.0;
  s.usd = s.device_hours * price.usd_per_device_hour();
  if (at.samples == 0) return s;
  const double per_sample = s.usd / static_cast<double>(at.samples);
  const double total = static_cast<double>(samples_per_epoch) * static_cast<double>(epochs);
  s.usd_per_epoch = per_sample * static_cast<double>(samples_per_epoch);
  s.usd_to_finish = s.usd + per_sample * std::max(0.0, total - static_cast<double>(at.samples));
  s.usd_per_million_samples = per_sample * 1e6;
  return s;
  // END STUDENT CODE
}

bool over_budget([[maybe_unused]] double budget_usd, [[maybe_unused]] const Spend& now,
                 [[maybe_unused]] double usd_per_step, [[maybe_unused]] double reserve_usd) {
  // BEGIN STUDENT CODE (09.3: the budget alarm)
  return budget_usd > 0 && now.usd + usd_per_step + reserve_usd > budget_usd;
  // END STUDENT CODE
}

}  // namespace lab09
