# Third-party packages. All come from Debian 12's archive (tools/setup-debian.sh); another LibTorch
# (official archive, pip torch) is picked with -DCMAKE_PREFIX_PATH=<its share/cmake>.
find_package(Torch REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3.9 REQUIRED)
find_package(tomlplusplus 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(Threads REQUIRED)
if(DDPLAB_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_package(benchmark QUIET)
endif()
message(STATUS "ddplab: LibTorch ${Torch_VERSION} from ${Torch_DIR}; lab tree: ${DDPLAB_LAB_SOURCE}")

# LibTorch's imported target carries its include directories; make them SYSTEM so that our
# -Werror applies only to our own code (imported targets are SYSTEM by default, but a pip
# torch's TorchConfig sets plain variables, so be explicit).
add_library(ddplab_torch INTERFACE)
target_link_libraries(ddplab_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(ddplab_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})

# c10d backends: Gloo only where its headers match this LibTorch, NCCL where LibTorch has CUDA.
include(CheckIncludeFileCXX)
set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS})
set(CMAKE_REQUIRED_FLAGS "-std=c++17 ${TORCH_CXX_FLAGS}")
set(CMAKE_REQUIRED_DEFINITIONS -DUSE_C10D_GLOO)
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)  # compile only: headers are the question
check_include_file_cxx(torch/csrc/distributed/c10d/ProcessGroupGloo.hpp DDPLAB_HAVE_GLOO)
unset(CMAKE_REQUIRED_DEFINITIONS)
unset(CMAKE_TRY_COMPILE_TARGET_TYPE)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_INCLUDES)
set(DDPLAB_HAVE_NCCL OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES OR CUDA_FOUND)
  set(DDPLAB_HAVE_CUDA ON)
  if(EXISTS "${TORCH_INSTALL_PREFIX}/include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp")
    set(DDPLAB_HAVE_NCCL ON)
  endif()
else()
  set(DDPLAB_HAVE_CUDA OFF)
endif()
if(DDPLAB_REQUIRE_CUDA AND NOT DDPLAB_HAVE_CUDA)
  message(FATAL_ERROR "the cuda preset needs a LibTorch with CUDA; ${Torch_DIR} has none. "
                      "Pass -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')")
endif()
# Open MPI (Debian: libopenmpi-dev) for the mpi backend (--backend mpi under mpirun): shared memory
# between the ranks of one machine. Optional: without it the kit builds with Gloo only.
# The project is C++ only: MPI's C API through FindMPI's CXX component, without the removed C++ bindings.
set(MPI_CXX_SKIP_MPICXX ON)
find_package(MPI COMPONENTS CXX QUIET)
if(MPI_CXX_FOUND)
  set(DDPLAB_HAVE_MPI ON)
else()
  set(DDPLAB_HAVE_MPI OFF)
endif()
message(STATUS "ddplab: Gloo backend ${DDPLAB_HAVE_GLOO}, MPI backend ${DDPLAB_HAVE_MPI}, CUDA ${DDPLAB_HAVE_CUDA}, NCCL ${DDPLAB_HAVE_NCCL}")
