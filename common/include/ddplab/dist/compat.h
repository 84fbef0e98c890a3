// Everything that differs between the LibTorch versions ddplab builds against (Debian's 1.13 and
// pip/official 2.x) lives here, so the rest of the code is version-free.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

namespace ddplab::dist::compat {

#if TORCH_VERSION_MAJOR >= 2
/// 2.x: the concrete process groups (ProcessGroupGloo, ProcessGroupNCCL) derive from c10d::Backend.
using Backend = c10d::Backend;
#else
/// 1.13: they derive from c10d::ProcessGroup directly.
using Backend = c10d::ProcessGroup;
#endif

using Work = c10d::Work;
using Store = c10d::Store;

/// Releases a backend's resources before its destructor runs. 2.x backends have shutdown() (a
/// ProcessGroupNCCL destroyed without it warns and may leak its communicators; Gloo's does
/// nothing) and abort() — for a group whose collective failed, where a graceful shutdown could
/// wait on a peer that is gone; 1.13's have neither, and 2.x releases that predate them are
/// detected rather than listed.
template <class B>
void shutdown_backend(B& backend, bool abort) {
#if TORCH_VERSION_MAJOR >= 2
  if constexpr (requires { backend.abort(); }) {
    if (abort) {
      backend.abort();
      return;
    }
  }
  if constexpr (requires { backend.shutdown(); }) backend.shutdown();
#else
  (void)backend;
  (void)abort;
#endif
}

}  // namespace ddplab::dist::compat
