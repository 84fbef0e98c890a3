// What differs between the LibTorch versions ddplab builds against — Debian's 1.13 (C++17) and
// PyPI's / the official archive's 2.x (C++20) — outside c10d (dist/compat.h) and autocast (amp.cpp),
// so the rest of the code is version-free. Each shim names the change and the version that made it,
// checked against the headers of torch 2.15.0 (pip, 2026-12-04) and Debian's 1.13.1.
#pragma once

#include <string>
#include <utility>

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/version.h>

/// True when this LibTorch is at least a.b.
#define DDPLAB_TORCH_AT_LEAST(a, b) \
  (TORCH_VERSION_MAJOR > (a) || (TORCH_VERSION_MAJOR == (a) && TORCH_VERSION_MINOR >= (b)))

// c10::Allocator::allocate became non-const in 2.3 (pytorch#120969), and allocators must then define
// copy_data (the copy-on-write work); 1.13's allocate is const and has no copy_data.
#if DDPLAB_TORCH_AT_LEAST(2, 3)
#define DDPLAB_ALLOCATE_CONST
#define DDPLAB_ALLOCATOR_COPY_DATA \
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
#define DDPLAB_ALLOCATE_CONST const
#define DDPLAB_ALLOCATOR_COPY_DATA
#endif

namespace ddplab::compat {

// An optimizer's state is keyed by the parameter's TensorImpl: as a string made by
// c10::guts::to_string in 1.13, as the pointer itself since 2.2 (pytorch#108480 removed to_string).
#if DDPLAB_TORCH_AT_LEAST(2, 2)
using OptimStateKey = void*;
inline OptimStateKey optim_state_key(const at::Tensor& p) { return p.unsafeGetTensorImpl(); }
#else
using OptimStateKey = std::string;
inline OptimStateKey optim_state_key(const at::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }
#endif

/// The owning pointer to an autograd node (grad_fn, a parameter's AccumulateGrad, an Edge's
/// function): std::shared_ptr<Node> in 1.13, c10::intrusive_ptr<Node> in recent 2.x (torch 2.15's
/// autograd/variable.h). Both have get(), ->, and compare with nullptr; the type is taken from
/// grad_accumulator() itself, so no version number is guessed.
using NodePtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

}  // namespace ddplab::compat
