# Third-party packages. Two LibTorch configurations are built and tested (docs/concepts/build.md):
#   debian (default)  Debian 12's LibTorch 1.13 (CPU, C++17) with Debian's Gloo headers and fmt.
#   pip               PyPI's torch 2.x with CUDA in a virtual environment (`DDPLAB_TORCH=pip ./kit ...`
#                     passes -DCMAKE_PREFIX_PATH=<torch.utils.cmake_prefix_path> and
#                     -DDDPLAB_REQUIRE_CUDA=ON); C++20, torch's own fmt, the NCCL headers of the
#                     nvidia-nccl wheel torch runs with.
# Any other LibTorch (the official archive) is picked the same way with -DCMAKE_PREFIX_PATH.

# --- Where is this LibTorch, and which CUDA toolkit matches it (before find_package(Torch), which
# runs enable_language(CUDA) and FindCUDA for a CUDA build). -------------------------------------
find_file(DDPLAB_TORCH_CONFIG_FILE Torch/TorchConfig.cmake TorchConfig.cmake
          PATHS ${CMAKE_PREFIX_PATH} ${Torch_DIR} PATH_SUFFIXES share/cmake NO_DEFAULT_PATH)
set(DDPLAB_TORCH_SITE "")
if(DDPLAB_TORCH_CONFIG_FILE)
  get_filename_component(_torch_prefix "${DDPLAB_TORCH_CONFIG_FILE}/../../../.." ABSOLUTE)
  get_filename_component(DDPLAB_TORCH_SITE "${_torch_prefix}/.." ABSOLUTE)  # site-packages of a pip torch
  # A pip torch names the CUDA it was built with in version.py ('13.2'); a matching nvcc installed in
  # the same environment (PyPI's nvidia-cuda-nvcc, which ./kit installs) is preferred over the
  # machine's toolkit, so the kit's programs load the CUDA runtime libtorch_cuda was built against.
  if(EXISTS "${_torch_prefix}/version.py")
    file(STRINGS "${_torch_prefix}/version.py" _cuda_line REGEX "^cuda[^=]*= *'[0-9.]+'")
    if(_cuda_line MATCHES "'([0-9]+\\.[0-9]+)")
      set(DDPLAB_TORCH_CUDA "${CMAKE_MATCH_1}")
    endif()
  endif()
  string(REGEX MATCH "^[0-9]+" _cuda_major "${DDPLAB_TORCH_CUDA}")
  set(_venv_cuda "${DDPLAB_TORCH_SITE}/nvidia/cu${_cuda_major}")
  if(DDPLAB_TORCH_CUDA AND NOT DEFINED CMAKE_CUDA_COMPILER)
    if(EXISTS "${_venv_cuda}/bin/nvcc")
      set(CMAKE_CUDA_COMPILER "${_venv_cuda}/bin/nvcc" CACHE FILEPATH "nvcc of torch's own CUDA (pip)")
    else()
      # The machine's toolkit (nvcc on PATH, $CUDA_HOME, /usr/local/cuda), named explicitly: torch's
      # CUDA modules below run with the system paths off.
      find_program(DDPLAB_NVCC nvcc HINTS ENV CUDA_HOME ENV CUDA_PATH /usr/local/cuda PATH_SUFFIXES bin)
      if(DDPLAB_NVCC)
        set(CMAKE_CUDA_COMPILER "${DDPLAB_NVCC}" CACHE FILEPATH "nvcc of the machine's CUDA toolkit")
      endif()
    endif()
  endif()
  if(DDPLAB_TORCH_CUDA AND CMAKE_CUDA_COMPILER AND NOT DEFINED CUDA_TOOLKIT_ROOT_DIR)
    get_filename_component(_tk "${CMAKE_CUDA_COMPILER}" REALPATH)
    get_filename_component(_tk "${_tk}/../.." ABSOLUTE)
    set(CUDAToolkit_ROOT "${_tk}" CACHE PATH "the CUDA toolkit of CMAKE_CUDA_COMPILER")
    set(CUDA_TOOLKIT_ROOT_DIR "${_tk}" CACHE PATH "the CUDA toolkit of CMAKE_CUDA_COMPILER")
  endif()
  # The wheels ship each library under its versioned name only (libcudart.so.13); a link, and CMake's
  # CUDA modules, look for the unversioned one. The build folder gets both names, pointing into the
  # environment, and the programs' RPATH then names the CUDA runtime torch was built against.
  if(CMAKE_CUDA_COMPILER STREQUAL "${_venv_cuda}/bin/nvcc")
    set(_links "${CMAKE_BINARY_DIR}/ddplab-cuda-links")
    file(MAKE_DIRECTORY "${_links}")
    file(GLOB _sos "${_venv_cuda}/lib/lib*.so.*")
    foreach(_so IN LISTS _sos)
      get_filename_component(_name "${_so}" NAME)
      string(REGEX REPLACE "\\.so\\..*" ".so" _dev "${_name}")
      file(CREATE_LINK "${_so}" "${_links}/${_dev}" SYMBOLIC)
      file(CREATE_LINK "${_so}" "${_links}/${_name}" SYMBOLIC)
    endforeach()
    list(PREPEND CMAKE_LIBRARY_PATH "${_links}")
  endif()
endif()

# TorchConfig looks for libc10 and libtorch with find_library(... PATHS <its prefix>/lib), which
# searches the system first: where Debian's LibTorch is installed too, a pip torch's build would
# link Debian's 1.13 libc10.so beside its own 2.x libraries. A LibTorch outside the system prefix is
# therefore looked up without the system paths.
if(DDPLAB_TORCH_CONFIG_FILE AND NOT _torch_prefix MATCHES "^/usr(/|$)")
  set(CMAKE_FIND_USE_CMAKE_SYSTEM_PATH FALSE)
  set(CMAKE_FIND_USE_SYSTEM_ENVIRONMENT_PATH FALSE)
  find_package(Torch REQUIRED)
  unset(CMAKE_FIND_USE_CMAKE_SYSTEM_PATH)
  unset(CMAKE_FIND_USE_SYSTEM_ENVIRONMENT_PATH)
  foreach(_lib IN LISTS TORCH_LIBRARIES TORCH_LIBRARY)
    if(_lib MATCHES "/lib(torch|c10)[^/]*\\.so" AND NOT _lib MATCHES "^${_torch_prefix}/")
      message(FATAL_ERROR "LibTorch ${Torch_VERSION} at ${_torch_prefix} would link ${_lib}, another LibTorch's library")
    endif()
  endforeach()
else()
  find_package(Torch REQUIRED)
endif()
set(DDPLAB_TORCH_PREFIX "${TORCH_INSTALL_PREFIX}")
if(NOT DDPLAB_TORCH_PREFIX)
  get_filename_component(DDPLAB_TORCH_PREFIX "${Torch_DIR}/../../.." ABSOLUTE)
endif()

# --- The language standard: recent torch headers stop below C++20 (ATen.h: "#error C++20 or later
# compatible compiler is required"); Debian's 1.13 is built and tested as C++17. ---------------------
if(Torch_VERSION VERSION_GREATER_EQUAL 2.0)
  set(CMAKE_CXX_STANDARD 20)
else()
  set(CMAKE_CXX_STANDARD 17)
endif()

# --- fmt: a pip torch installs its own fmt (12.x) in torch/include, which its c10d headers include
# and which would shadow Debian's (a link against libfmt.so.9 then fails); so with such a torch the
# whole kit uses torch's fmt, header-only, and Debian's is not used at all. ---------------------------
if(EXISTS "${DDPLAB_TORCH_PREFIX}/include/fmt/base.h" AND NOT DDPLAB_TORCH_PREFIX MATCHES "^/usr/?$")
  file(STRINGS "${DDPLAB_TORCH_PREFIX}/include/fmt/base.h" _fmt_line REGEX "define FMT_VERSION [0-9]+")
  string(REGEX MATCH "[0-9]+" DDPLAB_FMT_VERSION "${_fmt_line}")
  add_library(fmt::fmt INTERFACE IMPORTED)
  set_target_properties(fmt::fmt PROPERTIES INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1
                                            INTERFACE_INCLUDE_DIRECTORIES "${DDPLAB_TORCH_PREFIX}/include"
                                            INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${DDPLAB_TORCH_PREFIX}/include")
  set(DDPLAB_FMT_FROM "LibTorch's own (${DDPLAB_TORCH_PREFIX}/include/fmt, FMT_VERSION ${DDPLAB_FMT_VERSION}, header-only)")
elseif(DDPLAB_DEPS_DIR)
  add_library(fmt::fmt INTERFACE IMPORTED)
  set_target_properties(fmt::fmt PROPERTIES INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1
                                            INTERFACE_INCLUDE_DIRECTORIES "${DDPLAB_DEPS_DIR}/fmt/include")
  set(DDPLAB_FMT_FROM "${DDPLAB_DEPS_DIR}/fmt/include/fmt (header-only)")
else()
  find_package(fmt REQUIRED)
  set(DDPLAB_FMT_FROM "fmt ${fmt_VERSION} (${fmt_DIR})")
endif()
if(DDPLAB_DEPS_DIR)
  # A machine without the Debian packages (tools/gpu-check.sh on a GPU box without apt): the header-
  # only libraries and GoogleTest's sources as tools/gpu-bundle.sh copied them from Debian's packages.
  if(NOT EXISTS "${DDPLAB_DEPS_DIR}/include/nlohmann/json.hpp")
    message(FATAL_ERROR "DDPLAB_DEPS_DIR=${DDPLAB_DEPS_DIR} holds no include/nlohmann/json.hpp (tools/gpu-bundle.sh makes it)")
  endif()
  foreach(_t nlohmann_json::nlohmann_json CLI11::CLI11 tomlplusplus::tomlplusplus)
    add_library(${_t} INTERFACE IMPORTED)
    set_target_properties(${_t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${DDPLAB_DEPS_DIR}/include")
  endforeach()
  set_target_properties(tomlplusplus::tomlplusplus PROPERTIES INTERFACE_COMPILE_DEFINITIONS TOML_HEADER_ONLY=1)
  if(DDPLAB_BUILD_TESTS)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory("${DDPLAB_DEPS_DIR}/googletest" "${CMAKE_BINARY_DIR}/googletest" EXCLUDE_FROM_ALL SYSTEM)
    foreach(_t gtest gtest_main gmock gmock_main)
      if(NOT TARGET GTest::${_t})
        add_library(GTest::${_t} ALIAS ${_t})
      endif()
    endforeach()
  endif()
  message(STATUS "ddplab: CLI11, nlohmann-json, toml++ and GoogleTest from ${DDPLAB_DEPS_DIR}")
else()
  find_package(nlohmann_json 3.9 REQUIRED)
  find_package(tomlplusplus 3 REQUIRED)
  find_package(CLI11 REQUIRED)
  if(DDPLAB_BUILD_TESTS)
    find_package(GTest REQUIRED)
    find_package(benchmark QUIET)
  endif()
endif()
find_package(Threads REQUIRED)
message(STATUS "ddplab: LibTorch ${Torch_VERSION} from ${Torch_DIR} (C++${CMAKE_CXX_STANDARD}); lab tree: ${DDPLAB_LAB_SOURCE}")
message(STATUS "ddplab: fmt: ${DDPLAB_FMT_FROM}")

# LibTorch's imported target carries its include directories; make them SYSTEM so that our
# -Werror applies only to our own code (imported targets are SYSTEM by default, but a pip
# torch's TorchConfig sets plain variables, so be explicit).
add_library(ddplab_torch INTERFACE)
target_link_libraries(ddplab_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(ddplab_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})

# --- CUDA and NCCL. ------------------------------------------------------------------------------
set(DDPLAB_HAVE_NCCL OFF)
set(DDPLAB_HAVE_NVML_H OFF)
set(DDPLAB_NCCL_FROM "")
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES OR CUDA_FOUND)
  set(DDPLAB_HAVE_CUDA ON)
  # Torch's CUDA (version.py) against the toolkit this build compiles with: the kit's programs link
  # the toolkit's CUDA runtime, and libtorch_cuda then runs on that one.
  if(DDPLAB_TORCH_CUDA AND CUDAToolkit_VERSION)
    string(REGEX MATCH "^[0-9]+\\.[0-9]+" _tk "${CUDAToolkit_VERSION}")
    if(NOT _tk VERSION_EQUAL DDPLAB_TORCH_CUDA)
      message(FATAL_ERROR
        "LibTorch ${Torch_VERSION} (${DDPLAB_TORCH_PREFIX}) was built with CUDA ${DDPLAB_TORCH_CUDA}, but this build "
        "compiles with the CUDA toolkit ${CUDAToolkit_VERSION} (${CUDAToolkit_BIN_DIR}): the kit's programs would load "
        "CUDA ${_tk}'s runtime under a torch built for ${DDPLAB_TORCH_CUDA}. Install the matching nvcc into torch's "
        "environment (pip install 'nvidia-cuda-nvcc==${DDPLAB_TORCH_CUDA}.*'; ./kit does this for DDPLAB_TORCH=pip) "
        "or pass -DCMAKE_CUDA_COMPILER=<nvcc ${DDPLAB_TORCH_CUDA}> -DCUDAToolkit_ROOT=<its toolkit>, on a new build folder.")
    endif()
  endif()
  # The NCCL headers must be the NCCL torch runs with: ProcessGroupNCCL's layout depends on nccl.h's
  # NCCL_HAS_* macros, and the kit allocates it (libtorch_cuda's RPATH names ../../nvidia/nccl/lib).
  unset(_nccl_include)
  if(EXISTS "${DDPLAB_TORCH_SITE}/nvidia/nccl/include/nccl.h")
    set(_nccl_include "${DDPLAB_TORCH_SITE}/nvidia/nccl/include")
  else()
    find_path(_nccl_include nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDA_INCLUDE_DIRS} NO_CACHE)
  endif()
  if(_nccl_include)
    file(STRINGS "${_nccl_include}/nccl.h" _nccl_lines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3"
                         DDPLAB_NCCL_HEADER_VERSION "${_nccl_lines}")
    target_include_directories(ddplab_torch SYSTEM BEFORE INTERFACE "${_nccl_include}")
    set(DDPLAB_NCCL_FROM "nccl.h ${DDPLAB_NCCL_HEADER_VERSION} from ${_nccl_include}")
  endif()
  if(EXISTS "${DDPLAB_TORCH_PREFIX}/include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp" AND _nccl_include)
    set(DDPLAB_HAVE_NCCL ON)
  endif()
  # NVML's header (the toolkit's, or PyPI's nvidia-nvml-dev): the sampler then compiles against the
  # real declarations; the library itself (the driver's libnvidia-ml) is loaded at run time.
  find_path(DDPLAB_NVML_INCLUDE nvml.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDA_INCLUDE_DIRS} "${DDPLAB_DEPS_DIR}/include"
            NO_CACHE)
  if(DDPLAB_NVML_INCLUDE)
    set(DDPLAB_HAVE_NVML_H ON)
  endif()
else()
  set(DDPLAB_HAVE_CUDA OFF)
endif()

# --- c10d's Gloo: its headers are not in a pip wheel (nor in the official archive); Debian's
# libgloo-dev provides them. ProcessGroupGloo holds Gloo's objects through pointers only and guards
# the newer store API (GLOO_STORE_HAS_STORE_V2), so its layout does not depend on which Gloo's
# declarations it sees; the probe compiles it as the kit will (standard, defines, include order). --
set(_probe_dir "${CMAKE_BINARY_DIR}/CMakeFiles/ddplab_probes")
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)  # compile only: the headers are the question
file(WRITE "${_probe_dir}/gloo.cpp"
     "#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>\nint main() { return sizeof(c10d::ProcessGroupGloo) > 0 ? 0 : 1; }\n")
set(_gloo_includes ${TORCH_INCLUDE_DIRS})
if(DDPLAB_DEPS_DIR)
  list(APPEND _gloo_includes "${DDPLAB_DEPS_DIR}/include")  # Debian's Gloo headers, copied
  target_include_directories(ddplab_torch SYSTEM INTERFACE "${DDPLAB_DEPS_DIR}/include")
endif()
try_compile(_gloo_compiles "${_probe_dir}/gloo" SOURCES "${_probe_dir}/gloo.cpp"
            CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${_gloo_includes}"
            COMPILE_DEFINITIONS -DUSE_C10D_GLOO
            CXX_STANDARD ${CMAKE_CXX_STANDARD} CXX_STANDARD_REQUIRED ON
            OUTPUT_VARIABLE _gloo_probe_output)
find_path(DDPLAB_GLOO_INCLUDE gloo/algorithm.h HINTS "${DDPLAB_TORCH_PREFIX}/include" "${DDPLAB_DEPS_DIR}/include" NO_CACHE)
if(_gloo_compiles)
  set(DDPLAB_HAVE_GLOO ON)
  set(DDPLAB_GLOO_FROM "headers from ${DDPLAB_GLOO_INCLUDE}")
else()
  set(DDPLAB_HAVE_GLOO OFF)
  string(SUBSTRING "${_gloo_probe_output}" 0 2000 _gloo_probe_head)
  set(DDPLAB_GLOO_FROM "ProcessGroupGloo.hpp does not compile here (Debian: libgloo-dev):\n${_gloo_probe_head}")
endif()

if(DDPLAB_HAVE_NCCL)
  file(WRITE "${_probe_dir}/nccl.cpp"
       "#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>\nint main() { return sizeof(c10d::ProcessGroupNCCL) > 0 ? 0 : 1; }\n")
  get_target_property(_torch_inc ddplab_torch INTERFACE_INCLUDE_DIRECTORIES)
  try_compile(DDPLAB_NCCL_COMPILES "${_probe_dir}/nccl" SOURCES "${_probe_dir}/nccl.cpp"
              CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${_torch_inc};${CUDAToolkit_INCLUDE_DIRS};${CUDA_INCLUDE_DIRS}"
              COMPILE_DEFINITIONS -DUSE_C10D_NCCL
              CXX_STANDARD ${CMAKE_CXX_STANDARD} CXX_STANDARD_REQUIRED ON
              OUTPUT_VARIABLE _nccl_probe_output)
  if(NOT DDPLAB_NCCL_COMPILES)
    string(SUBSTRING "${_nccl_probe_output}" 0 2000 _nccl_probe_head)
    message(WARNING "ProcessGroupNCCL.hpp does not compile with ${DDPLAB_NCCL_FROM}:\n${_nccl_probe_head}")
    set(DDPLAB_HAVE_NCCL OFF)
  endif()
endif()

unset(CMAKE_TRY_COMPILE_TARGET_TYPE)

# A CUDA build (the cuda presets, DDPLAB_TORCH=pip) must have every GPU path: one that is silently
# compiled out would leave --device cuda, NCCL or the CPU collectives untested.
if(DDPLAB_REQUIRE_CUDA)
  set(_missing "")
  if(NOT DDPLAB_HAVE_CUDA)
    list(APPEND _missing "CUDA (${Torch_DIR} is a CPU-only LibTorch; pass "
                         "-DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)'))")
  endif()
  if(DDPLAB_HAVE_CUDA AND NOT DDPLAB_HAVE_NCCL)
    list(APPEND _missing "NCCL (no nccl.h that ProcessGroupNCCL.hpp compiles with: ${DDPLAB_NCCL_FROM})")
  endif()
  if(DDPLAB_HAVE_CUDA AND NOT DDPLAB_HAVE_NVML_H)
    list(APPEND _missing "NVML's declarations (no nvml.h beside ${CUDAToolkit_INCLUDE_DIRS}; pip install nvidia-nvml-dev)")
  endif()
  if(NOT DDPLAB_HAVE_GLOO)
    list(APPEND _missing "Gloo: ${DDPLAB_GLOO_FROM}")
  endif()
  if(_missing)
    list(JOIN _missing "\n  " _missing_text)
    message(FATAL_ERROR "DDPLAB_REQUIRE_CUDA: this build would compile out\n  ${_missing_text}")
  endif()
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
# The folders outside the system ones whose libraries the kit's programs load (a pip torch, its
# nvidia-* wheels, the CUDA links above): the grader's sandbox lets its programs read them.
set(DDPLAB_LIBRARY_DIRS "")
foreach(_dir "${DDPLAB_TORCH_PREFIX}" "${DDPLAB_TORCH_SITE}/nvidia" "${CMAKE_BINARY_DIR}/ddplab-cuda-links")
  if(IS_DIRECTORY "${_dir}" AND NOT _dir MATCHES "^/(usr|lib|lib64|opt|etc)(/|$)")
    list(APPEND DDPLAB_LIBRARY_DIRS "${_dir}")
  endif()
endforeach()
message(STATUS "ddplab: Gloo ${DDPLAB_GLOO_FROM}")
if(DDPLAB_HAVE_CUDA)
  message(STATUS "ddplab: CUDA ${CUDAToolkit_VERSION} (${CUDAToolkit_BIN_DIR}; torch built with ${DDPLAB_TORCH_CUDA}); NCCL ${DDPLAB_NCCL_FROM}; NVML header ${DDPLAB_NVML_INCLUDE}")
endif()
message(STATUS "ddplab: Gloo backend ${DDPLAB_HAVE_GLOO}, MPI backend ${DDPLAB_HAVE_MPI}, CUDA ${DDPLAB_HAVE_CUDA}, NCCL ${DDPLAB_HAVE_NCCL}")
# What this build has, recorded in CMakeCache.txt for whoever inspects a build folder.
foreach(_v DDPLAB_HAVE_GLOO DDPLAB_HAVE_MPI DDPLAB_HAVE_CUDA DDPLAB_HAVE_NCCL)
  set(${_v} ${${_v}} CACHE INTERNAL "found at configure time (cmake/Dependencies.cmake)" FORCE)
endforeach()
set(DDPLAB_TORCH_VERSION "${Torch_VERSION}" CACHE INTERNAL "the LibTorch this build compiles against" FORCE)
