// Which kernels OpenBLAS runs on this CPU. OpenBLAS (DYNAMIC_ARCH, as Debian builds it) picks its
// kernels by the CPU's model number when it is loaded; a model it does not know, as a hypervisor
// presents ("Intel(R) Xeon(R) Processor"), gets its Prescott (SSE3) kernels even on an AVX-512 CPU.
// Measured on the 2-core VM (ddplab doctor, single-thread SGEMM): 32.5 GFLOP/s as Prescott, 78.6 as
// Haswell, 145.8 as SkylakeX. OPENBLAS_CORETYPE, read when OpenBLAS is loaded, chooses them.
// LibTorch-free: the launcher's front uses it too.
#pragma once

#include <string>

namespace ddplab::sys {

/// The OPENBLAS_CORETYPE with the best kernels `cpu_flags` (/proc/cpuinfo's "flags" line) allow,
/// when `core` (openblas_get_corename()) is one of OpenBLAS's fallbacks for an unknown model;
/// "" when OpenBLAS chose itself or the CPU has nothing better (no AVX).
std::string better_openblas_coretype(const std::string& core, const std::string& cpu_flags);

/// The same for the OpenBLAS this process has loaded and this CPU; "" when none is loaded.
std::string better_openblas_coretype();

/// For the processes this one starts: when OPENBLAS_CORETYPE is unset and the OpenBLAS LibTorch
/// loads chose older kernels than the CPU supports, sets OPENBLAS_CORETYPE to the better ones.
/// Asks the OpenBLAS in this process or, with `load_system_blas` (a process without LibTorch: the
/// launcher's front), the system's libblas.so.3, loaded to ask it. This process keeps the kernels it
/// has. Returns what it set, or "".
std::string adopt_better_openblas_coretype(bool load_system_blas = false);

/// The kernels the OpenBLAS this process has loaded runs ("SkylakeX", "Zen", "Prescott"), "" when
/// none is loaded (the pip wheel links MKL).
std::string openblas_kernels();

/// For a lab run directly, which no launcher, grader or ./kit has given OPENBLAS_CORETYPE: when the
/// OpenBLAS this process loaded chose older kernels than the CPU supports, sets OPENBLAS_CORETYPE to
/// the better ones and executes this program again with the same arguments, so that OpenBLAS
/// chooses at load (a lab 09 step at batch 256 on the Intel 2-core VM: 30 ms as Prescott, 10.5 as
/// SkylakeX). Returns when there is nothing to do (set already, chosen well, no OpenBLAS) or the
/// exec failed; the variable then stays set for the programs this one starts.
void restart_with_better_openblas_coretype(char** argv);

}  // namespace ddplab::sys
