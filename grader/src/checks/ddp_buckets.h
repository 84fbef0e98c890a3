// The bucket layout PyTorch DDP gives a model's gradients (c10d's compute_bucket_assignment_by_size
// over the parameters in gradient-ready order), recomputed by the grader from the parameter list a
// run reports, so that `grad_sync` judges the student's buckets against the grader's own layout.
// Free of LibTorch: parameters are names, sizes, dtypes and devices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddplab::grader::checks {

/// One parameter as the layout sees it.
struct LayoutParam {
  std::string name;
  uint64_t bytes = 0;  ///< numel x element size
  std::string dtype;   ///< "float32", ...: parameters of different dtypes never share a bucket
  std::string device;  ///< "cpu", "cuda:0", ...: nor do parameters on different devices
};

/// One bucket: its members as indices into the parameter list (registration order), in the order
/// they joined it, and their total bytes.
struct LayoutBucket {
  std::vector<size_t> params;
  uint64_t bytes = 0;
};

/// DDP's layout of `params` (in registration order): walk them from the last registered to the
/// first; one open bucket per (dtype, device); a parameter joins its key's open bucket, and when
/// that bucket's bytes reach the key's current limit (>=) it is closed, and that key's limit
/// becomes `bucket_cap_bytes` (it starts at `first_bucket_bytes`). A bucket may so exceed its
/// limit by its last tensor. At the end the open buckets are closed. Buckets are returned in the
/// order of their first member in the walk (the largest registration index they hold,
/// descending): the bucket of the last-registered parameter first, launch order.
std::vector<LayoutBucket> ddp_bucket_layout(const std::vector<LayoutParam>& params, uint64_t first_bucket_bytes,
                                            uint64_t bucket_cap_bytes);

/// One bucket per parameter, in registration order (the per-parameter sync).
std::vector<LayoutBucket> per_param_layout(const std::vector<LayoutParam>& params);

}  // namespace ddplab::grader::checks
