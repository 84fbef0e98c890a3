# Compiler flags through interface targets, never global: warnings as errors on our code only.
add_library(ddplab_flags INTERFACE)
target_compile_options(ddplab_flags INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-unused-parameter)
# Warnings are errors on the compilers the kit is built and tested with (Clang 14 and GCC 12, CI);
# tools/gpu-check.sh turns that off on a GPU machine's own compiler, whose new warnings it prints.
option(DDPLAB_WERROR "Treat warnings in the kit's code as errors" ON)
if(DDPLAB_WERROR)
  target_compile_options(ddplab_flags INTERFACE -Werror)
endif()
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  # A skeleton's class declares the members its student code will use: unused until then.
  target_compile_options(ddplab_flags INTERFACE -Wno-unused-private-field)
endif()
if(DDPLAB_SANITIZE)
  target_compile_options(ddplab_flags INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                                               -fno-sanitize-recover=undefined)
  target_link_options(ddplab_flags INTERFACE -fsanitize=address,undefined)
endif()

# PyPI's torch wheels export their own copy of std::filesystem (torch 2.15: 142 symbols from
# libtorch_cpu.so; 2.11: 64 from libtorch.so), and both the link and the dynamic loader take a
# symbol from the first library that defines it: with libstdc++ after torch on the command line,
# the kit's std::filesystem calls ran torch's copy. torch 2.11's std::filesystem::remove_all calls
# recursive_directory_iterator::__erase, which GCC 12's libstdc++ lacks: it jumped to address 0
# (reproduced here; and on an H200 machine it killed the grader). The shared C++ runtime is
# therefore linked first, by its file (a toolchain whose own libstdc++ is static-only falls back to
# the system's libstdc++.so.6, which torch loads anyway); `ddplab doctor` says which library
# std::filesystem comes from, and the grader refuses to start when it is not the C++ runtime.
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang" AND NOT APPLE)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so.6 OUTPUT_VARIABLE DDPLAB_LIBSTDCXX
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT IS_ABSOLUTE "${DDPLAB_LIBSTDCXX}" OR NOT EXISTS "${DDPLAB_LIBSTDCXX}")
    find_library(DDPLAB_LIBSTDCXX_SYSTEM NAMES libstdc++.so.6)
    set(DDPLAB_LIBSTDCXX "${DDPLAB_LIBSTDCXX_SYSTEM}")
  endif()
  if(DDPLAB_LIBSTDCXX)
    get_filename_component(DDPLAB_LIBSTDCXX "${DDPLAB_LIBSTDCXX}" REALPATH)
    target_link_options(ddplab_flags INTERFACE "LINKER:--push-state,--no-as-needed" "${DDPLAB_LIBSTDCXX}"
                                               "LINKER:--pop-state")
    message(STATUS "ddplab: the C++ runtime linked first: ${DDPLAB_LIBSTDCXX}")
  else()
    message(WARNING "no shared libstdc++.so.6 found: std::filesystem may resolve to a torch wheel's copy")
  endif()
endif()

# The linker: lld links a LibTorch program in 0.3 s where GNU ld takes 1.5 s (lab02_process_group on
# the 2-core VM); every lab, test binary and graded submission is a link. DDPLAB_LINKER=default keeps
# the toolchain's own (also where lld is missing: Debian's `lld`, installed by tools/setup-debian.sh).
set(DDPLAB_LINKER lld CACHE STRING "Linker of the kit's programs: lld (where the compiler can use it) or default")
set_property(CACHE DDPLAB_LINKER PROPERTY STRINGS lld default)
if(DDPLAB_LINKER STREQUAL "lld")
  include(CheckLinkerFlag)
  check_linker_flag(CXX -fuse-ld=lld DDPLAB_HAVE_LLD)
  if(DDPLAB_HAVE_LLD)
    target_link_options(ddplab_flags INTERFACE -fuse-ld=lld)
  else()
    message(STATUS "lld not found (Debian: lld): linking with the toolchain's default linker, ~5x slower")
  endif()
elseif(NOT DDPLAB_LINKER STREQUAL "default")
  message(FATAL_ERROR "DDPLAB_LINKER=${DDPLAB_LINKER}: expected lld or default")
endif()

# Precompiled LibTorch headers: one PCH, reused by every target (see README "Build time").
if(DDPLAB_PCH)
  add_library(ddplab_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch.cpp)
  target_link_libraries(ddplab_pch PRIVATE ddplab_torch ddplab_flags fmt::fmt nlohmann_json::nlohmann_json)
  target_precompile_headers(ddplab_pch PRIVATE ${PROJECT_SOURCE_DIR}/cmake/pch.h)
endif()

# ddplab_sanitized_pch(<sanitizer> <flags_var> <pch_var>): the compile flags of the lab tests built
# under <sanitizer> (address,undefined or thread) for `ddplab grade --sanitize`, and a PCH target
# compiled with exactly those flags (empty without DDPLAB_PCH). The kit's PCH cannot serve them:
# Clang refuses a PCH built with other sanitizer or optimisation flags. Without one, each sanitized
# file parsed LibTorch's headers again: 20-45 s a file on the 2-core VM, and every sanitized grading
# compiles the student's file (docs/concepts/build.md). Built on demand, once per sanitizer.
function(ddplab_sanitized_pch sanitizer flags_var pch_var)
  set(flags -fsanitize=${sanitizer} -fno-omit-frame-pointer -g -O1)
  if(sanitizer MATCHES "undefined")
    list(APPEND flags -fno-sanitize-recover=undefined)
  endif()
  set(${flags_var} ${flags} PARENT_SCOPE)
  set(${pch_var} "" PARENT_SCOPE)
  if(NOT DDPLAB_PCH)
    return()
  endif()
  string(REPLACE "," "_" pch ddplab_pch_${sanitizer})
  if(NOT TARGET ${pch})
    add_library(${pch} OBJECT EXCLUDE_FROM_ALL ${PROJECT_SOURCE_DIR}/cmake/pch.cpp)
    target_link_libraries(${pch} PRIVATE ddplab_torch ddplab_flags fmt::fmt nlohmann_json::nlohmann_json)
    target_compile_options(${pch} PRIVATE ${flags})
    target_precompile_headers(${pch} PRIVATE ${PROJECT_SOURCE_DIR}/cmake/pch.h)
  endif()
  set(${pch_var} ${pch} PARENT_SCOPE)
endfunction()

# ddplab_target(<name>): apply our flags and the shared PCH to one of our targets, and compile its
# sources in batches (ddplab_unity, at the end of the folder's CMakeLists.txt, once the sources'
# ddplab_no_pch properties are known).
function(ddplab_target name)
  target_link_libraries(${name} PRIVATE ddplab_flags)
  if(DDPLAB_PCH)
    target_precompile_headers(${name} REUSE_FROM ddplab_pch)
  endif()
  if(DDPLAB_UNITY)
    # (a deferred call's arguments are read when it runs: the name is written into it now)
    cmake_language(EVAL CODE "cmake_language(DEFER CALL ddplab_unity [[${name}]])")
  endif()
endfunction()

# ddplab_unity(<name>): a unity build in batches of DDPLAB_UNITY_BATCH sources, the ones that use the
# PCH apart from those that skip it (ddplab_no_pch: a batch of those is compiled without it too).
# Every source of ours that includes LibTorch pays for the same instantiations and emits the same
# inline functions; a batch pays once. Six of common/'s files compiled in 39 s one by one and 25 s
# as one (2-core VM, 2026-12-07; docs/concepts/build.md has the whole build). A source with options
# of its own (COMPILE_OPTIONS) or marked SKIP_UNITY_BUILD_INCLUSION is compiled alone.
function(ddplab_unity name)
  get_target_property(sources ${name} SOURCES)
  get_target_property(binary_dir ${name} BINARY_DIR)
  set(count_pch 0)
  set(count_plain 0)
  set(batched)
  foreach(src IN LISTS sources)
    if(NOT src MATCHES "\\.cpp$")
      continue()
    endif()
    get_source_file_property(skip ${src} SKIP_UNITY_BUILD_INCLUSION)
    get_source_file_property(options ${src} COMPILE_OPTIONS)
    if(skip OR options)
      set_source_files_properties(${src} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
      continue()
    endif()
    get_source_file_property(no_pch ${src} SKIP_PRECOMPILE_HEADERS)
    set(kind pch)
    if(no_pch OR NOT DDPLAB_PCH)
      set(kind plain)
    endif()
    math(EXPR batch "${count_${kind}} / ${DDPLAB_UNITY_BATCH}")
    math(EXPR count_${kind} "${count_${kind}} + 1")
    set_source_files_properties(${src} PROPERTIES UNITY_GROUP ${kind}${batch})
    list(APPEND batched ${src})
  endforeach()
  list(LENGTH batched n)
  if(n LESS 2)
    return()
  endif()
  set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE GROUP)
  # The generated batches of sources that skip the PCH skip it too.
  if(DDPLAB_PCH AND count_plain GREATER 0)
    math(EXPR last "(${count_plain} - 1) / ${DDPLAB_UNITY_BATCH}")
    foreach(batch RANGE ${last})
      set_source_files_properties(${binary_dir}/CMakeFiles/${name}.dir/Unity/unity_plain${batch}_cxx.cxx
                                  PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    endforeach()
  endif()
endfunction()

# ddplab_no_pch(<sources...>): sources that include no LibTorch header skip the 630 MB
# precompiled header: loading it costs ~14 s per file, compiling them without it ~1 s (measured;
# docs/concepts/build.md). Paths are relative to the calling CMakeLists.txt.
function(ddplab_no_pch)
  set_source_files_properties(${ARGN} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
endfunction()

# ddplab_flags_doc_test(<target> <name>): a test that the flag tables of docs/concepts/metrics.md
# list every flag of the program with its environment variable, and nothing it lacks.
function(ddplab_flags_doc_test target name)
  add_test(NAME docs.flags_table_${name}
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:${target}> -DNAME=${name}
                   -DDOC=${PROJECT_SOURCE_DIR}/docs/concepts/metrics.md -P ${PROJECT_SOURCE_DIR}/cmake/CheckFlagsDoc.cmake)
  set_tests_properties(docs.flags_table_${name} PROPERTIES LABELS docs)
endfunction()

# ddplab_add_gtest(<target> LABELS ...): one ctest entry per GoogleTest binary. Every process that
# links LibTorch spends ~2 s relocating it at start-up, so one entry per test case (gtest_discover_
# tests) would spend minutes of a CI run on loading alone; the binary's own output names the
# failing cases.
function(ddplab_add_gtest target)
  cmake_parse_arguments(T "" "" "LABELS" ${ARGN})
  add_test(NAME ${target} COMMAND ${target} --gtest_color=no)
  set_tests_properties(${target} PROPERTIES LABELS "${T_LABELS}" TIMEOUT 600)
endfunction()
