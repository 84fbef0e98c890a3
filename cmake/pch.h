// Headers precompiled once for every ddplab target: LibTorch's are most of a clean build's time.
#pragma once
#include <torch/torch.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
