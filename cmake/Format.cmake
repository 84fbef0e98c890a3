# The C++ style of .clang-format (Google's at 120 columns), applied by `cmake --build <b> --target
# format` and checked by the `check-format` target and the style.clang_format test (CI). Debian 12's
# clang-format 14 is the reference: other versions may break lines differently.
find_program(DDPLAB_CLANG_FORMAT NAMES clang-format-14 clang-format)
set(DDPLAB_FORMAT_DIRS common datasets grader labs solutions tools)
set(sources)
foreach(dir IN LISTS DDPLAB_FORMAT_DIRS)
  file(GLOB_RECURSE found CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${dir}/*.cpp ${PROJECT_SOURCE_DIR}/${dir}/*.h)
  list(APPEND sources ${found})
endforeach()
if(NOT DDPLAB_CLANG_FORMAT)
  message(WARNING "clang-format not found (Debian: clang-format, installed by tools/setup-debian.sh): the format "
                  "targets and the style.clang_format test are not available")
  return()
endif()
execute_process(COMMAND ${DDPLAB_CLANG_FORMAT} --version OUTPUT_VARIABLE version)
if(NOT version MATCHES "version 14\\.")
  message(WARNING "${DDPLAB_CLANG_FORMAT} is not clang-format 14 (${version}): the style check may disagree "
                  "with CI's")
endif()
add_custom_target(format COMMAND ${DDPLAB_CLANG_FORMAT} -i ${sources} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  COMMENT "clang-format -i over common/ datasets/ grader/ labs/ solutions/ tools/")
add_custom_target(check-format COMMAND ${DDPLAB_CLANG_FORMAT} --dry-run --Werror ${sources}
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} COMMENT "clang-format --dry-run --Werror")
if(DDPLAB_BUILD_TESTS)
  add_test(NAME style.clang_format COMMAND ${DDPLAB_CLANG_FORMAT} --dry-run --Werror ${sources}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(style.clang_format PROPERTIES LABELS style)
endif()
