// A stand-in NVML for the sampler's tests: the entry points ddplab::nvml::Sampler loads, with
// scripted answers. FAKE_NVML_GPU="20,80,80" cycles the utilization readings; FAKE_NVML_MEM_MB
// is the memory in use; FAKE_NVML_INIT_FAILS=1 makes nvmlInit_v2 fail; FAKE_NVML_DEVICES (default
// 1) is how many devices exist.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace {
struct Utilization {
  unsigned int gpu;
  unsigned int memory;
};
struct Memory {
  unsigned long long total, free, used;
};
std::atomic<int> calls{0};
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}
std::vector<unsigned> script() {
  std::vector<unsigned> out;
  const char* v = std::getenv("FAKE_NVML_GPU");
  std::stringstream in(v != nullptr ? v : "50");
  for (std::string item; std::getline(in, item, ',');) out.push_back(static_cast<unsigned>(std::stoul(item)));
  return out;
}
}  // namespace

extern "C" {
__attribute__((visibility("default"))) int nvmlInit_v2() { return env_int("FAKE_NVML_INIT_FAILS", 0) ? 999 : 0; }
__attribute__((visibility("default"))) int nvmlShutdown() { return 0; }
__attribute__((visibility("default"))) const char* nvmlErrorString(int rc) {
  return rc == 999 ? "Unknown Error" : rc == 2 ? "Invalid Argument" : "error";
}
__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (static_cast<int>(index) >= env_int("FAKE_NVML_DEVICES", 1)) return 2;
  *device = reinterpret_cast<void*>(static_cast<uintptr_t>(index + 1));
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetUtilizationRates(void*, Utilization* u) {
  const std::vector<unsigned> s = script();
  const unsigned g = s[static_cast<size_t>(calls++) % s.size()];
  u->gpu = g;
  u->memory = g / 2;
  return 0;
}
__attribute__((visibility("default"))) int nvmlSystemGetDriverVersion(char* out, unsigned int size) {
  const std::string v = "999.1.2-fake";
  if (size < v.size() + 1) return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  v.copy(out, v.size());
  out[v.size()] = '\0';
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetName(void* device, char* out, unsigned int size) {
  const std::string v = "Fake GPU " + std::to_string(reinterpret_cast<uintptr_t>(device) - 1);
  if (size < v.size() + 1) return 7;
  v.copy(out, v.size());
  out[v.size()] = '\0';
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo(void*, Memory* m) {
  m->total = 80ull << 30;
  m->used = static_cast<unsigned long long>(env_int("FAKE_NVML_MEM_MB", 1024)) << 20;
  m->free = m->total - m->used;
  return 0;
}
}
