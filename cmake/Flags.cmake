# Compiler flags through interface targets, never global: warnings as errors on our code only.
add_library(ddplab_flags INTERFACE)
target_compile_options(ddplab_flags INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-unused-parameter -Werror)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  # A skeleton's class declares the members its student code will use: unused until then.
  target_compile_options(ddplab_flags INTERFACE -Wno-unused-private-field)
endif()
if(DDPLAB_SANITIZE)
  target_compile_options(ddplab_flags INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                                               -fno-sanitize-recover=undefined)
  target_link_options(ddplab_flags INTERFACE -fsanitize=address,undefined)
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

# ddplab_target(<name>): apply our flags and the shared PCH to one of our targets.
function(ddplab_target name)
  target_link_libraries(${name} PRIVATE ddplab_flags)
  if(DDPLAB_PCH)
    target_precompile_headers(${name} REUSE_FROM ddplab_pch)
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
