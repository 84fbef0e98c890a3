// The kit's definitions of lab09.h's helpers (not the exercises): model signatures, the JSON
// forms of the checkpoint's header, tensor digests and the generator's state. Not edited by
// students.
#pragma once

#include <mutex>

#include <ATen/CPUGeneratorImpl.h>

#include "ddplab/data/shard.h"
#include "ddplab/report.h"

namespace lab09 {

inline std::vector<TensorShape> model_signature(const torch::nn::Module& model) {
  std::vector<TensorShape> s;
  for (const auto& p : model.named_parameters()) s.push_back({p.key(), p.value().sizes().vec()});
  for (const auto& b : model.named_buffers()) s.push_back({b.key(), b.value().sizes().vec()});
  return s;
}

inline void to_json(nlohmann::json& j, const TensorShape& t) { j = {{"name", t.name}, {"shape", t.shape}}; }
inline void from_json(const nlohmann::json& j, TensorShape& t) {
  j.at("name").get_to(t.name);
  j.at("shape").get_to(t.shape);
}
inline void to_json(nlohmann::json& j, const JobIdentity& id) {
  j = {{"model", id.model}, {"world_size", id.world_size},      {"batch", id.batch}, {"accumulate", id.accumulate},
       {"seed", id.seed},   {"train_samples", id.train_samples}};
}
inline void from_json(const nlohmann::json& j, JobIdentity& id) {
  j.at("model").get_to(id.model);
  j.at("world_size").get_to(id.world_size);
  j.at("batch").get_to(id.batch);
  j.at("accumulate").get_to(id.accumulate);
  j.at("seed").get_to(id.seed);
  j.at("train_samples").get_to(id.train_samples);
}
inline void to_json(nlohmann::json& j, const Position& p) {
  j = {{"step", p.step},
       {"epoch", p.epoch},
       {"step_in_epoch", p.step_in_epoch},
       {"samples", p.samples},
       {"device_seconds", p.device_seconds},
       {"loss_scale", p.loss_scale},
       {"scale_growth_tracker", p.scale_growth_tracker}};
}
inline void from_json(const nlohmann::json& j, Position& p) {
  j.at("step").get_to(p.step);
  j.at("epoch").get_to(p.epoch);
  j.at("step_in_epoch").get_to(p.step_in_epoch);
  j.at("samples").get_to(p.samples);
  j.at("device_seconds").get_to(p.device_seconds);
  // The loss scaler's state (fp16 runs): absent in a checkpoint of a job without one.
  p.loss_scale = j.value("loss_scale", 0.0);
  p.scale_growth_tracker = j.value("scale_growth_tracker", int64_t{0});
}

inline std::string tensors_digest(const std::vector<torch::Tensor>& tensors) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const auto& t : tensors) {
    const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    h = ddplab::data::fnv1a64(c.data_ptr(), static_cast<size_t>(c.numel() * c.element_size()), h);
  }
  return ddplab::hex64(h);
}

inline std::vector<torch::Tensor> model_tensors(const torch::nn::Module& model) {
  std::vector<torch::Tensor> t = model.parameters();
  for (const auto& b : model.buffers()) t.push_back(b);
  return t;
}

inline torch::Tensor rng_state() { return at::detail::getDefaultCPUGenerator().get_state(); }
inline void set_rng_state(const torch::Tensor& state) {
  at::Generator g = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

}  // namespace lab09
