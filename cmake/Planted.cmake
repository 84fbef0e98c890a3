# The planted bugs and the audit (labs/<lab>/planted/<bug>/, labs/<lab>/audit/<bug>/): each is the
# lab's reference solution with one text replaced (find.txt -> replace.txt) in one student file,
# and an expect.toml saying which check must fail (or pass) and with what diagnosis. Read by labs/
# (each variant compiled as a lab of its own: DDPLAB_BUILD_PLANTED) and grader/ (its ctest gradings).

# Every bug folder of `folder`'s lab (planted first, then audit), into `out`.
function(ddplab_planted_bugs folder out)
  file(GLOB bugs LIST_DIRECTORIES true CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/labs/${folder}/planted/*
       ${PROJECT_SOURCE_DIR}/labs/${folder}/audit/*)
  set(dirs)
  foreach(bug IN LISTS bugs)
    if(IS_DIRECTORY ${bug})
      list(APPEND dirs ${bug})
    endif()
  endforeach()
  set(${out} ${dirs} PARENT_SCOPE)
endfunction()

# Reads <bug>/expect.toml (plain `key = "value"` lines and comments, no TOML parser) into want_<key>
# in the caller's scope, checks its values, and sets bug_name, bug_set (planted or audit), bug_lab
# and bug_variant: the folder under `planted_root` that holds the variant's student file, written
# here from the current solution (so the variants follow the solutions). A solution that no
# longer contains find.txt stops the configure instead of silently testing nothing.
# `calibrated = "yes"`: the check is relative to the calibration. `also = "id id"`: checks graded
# too (not expected to fail or pass), for a diagnosis that depends on them (a check's `builds_on`).
# `expect = "passed"`: a correct variant, which must keep the check (then `diagnosis` is not read).
# `sanitize = "yes"`: graded with --sanitize (the unit tests built under the lab's sanitizer).
# `slot = "yes"`: compiled by the grader in its submission slot, confined as a student's file is
# (what the bug tests is that confinement), never in the build. A sanitized one is compiled there too.
# Sets bug_prebuilt: whether the build compiles the variant (DDPLAB_BUILD_PLANTED, neither of those).
macro(ddplab_read_bug bug planted_root)
  get_filename_component(bug_name ${bug} NAME)
  get_filename_component(_set_dir ${bug}/.. ABSOLUTE)
  get_filename_component(bug_set ${_set_dir} NAME)
  get_filename_component(bug_lab ${bug}/../.. ABSOLUTE)
  get_filename_component(bug_lab ${bug_lab} NAME)
  set(_expect_keys file check diagnosis calibrated also expect sanitize slot)
  foreach(_key IN LISTS _expect_keys)
    unset(want_${_key})
  endforeach()
  file(STRINGS ${bug}/expect.toml _lines)
  set(_n 0)
  foreach(_line IN LISTS _lines)
    math(EXPR _n "${_n} + 1")
    if(_line MATCHES "^[ \t]*(#.*)?$")
      continue()
    elseif(_line MATCHES "^([a-z_]+) = \"([^\"\\]*)\"[ \t]*$" AND CMAKE_MATCH_1 IN_LIST _expect_keys)
      set(want_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
    else()
      message(FATAL_ERROR "${bug}/expect.toml:${_n}: expected `file`, `check`, `diagnosis`, `calibrated`, `also`, `expect`, `sanitize` or `slot` = \"...\" (no escapes)")
    endif()
  endforeach()
  foreach(_key calibrated sanitize slot)
    if(NOT DEFINED want_${_key})
      set(want_${_key} no)
    elseif(NOT want_${_key} MATCHES "^(yes|no)$")
      message(FATAL_ERROR "${bug}/expect.toml: ${_key} must be \"yes\" or \"no\"")
    endif()
  endforeach()
  if(NOT DEFINED want_expect)
    set(want_expect failed)
  elseif(NOT want_expect MATCHES "^(failed|passed)$")
    message(FATAL_ERROR "${bug}/expect.toml: expect must be \"failed\" or \"passed\"")
  endif()
  if(want_expect STREQUAL "passed")
    set(want_diagnosis "")
    set(_required file check)
  else()
    set(_required file check diagnosis)
  endif()
  foreach(_key IN LISTS _required)
    if(NOT DEFINED want_${_key})
      message(FATAL_ERROR "${bug}/expect.toml: no `${_key} = \"...\"`")
    endif()
  endforeach()
  set(bug_prebuilt OFF)
  if(DDPLAB_BUILD_PLANTED AND NOT want_sanitize AND NOT want_slot)
    set(bug_prebuilt ON)
  endif()
  set(_src ${PROJECT_SOURCE_DIR}/solutions/${bug_lab}/${want_file})
  if(NOT EXISTS ${_src})
    message(FATAL_ERROR "${bug_set} bug ${bug_lab}/${bug_name}: ${bug}/expect.toml names ${want_file}, which solutions/${bug_lab}/ lacks")
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_src} ${bug}/find.txt ${bug}/replace.txt ${bug}/expect.toml)
  file(READ ${_src} _text)
  file(READ ${bug}/find.txt _find)
  file(READ ${bug}/replace.txt _replace)
  string(FIND "${_text}" "${_find}" _at)
  if(_at EQUAL -1)
    message(FATAL_ERROR "${bug_set} bug ${bug_lab}/${bug_name}: ${bug}/find.txt no longer occurs in ${_src}; update it")
  endif()
  string(REPLACE "${_find}" "${_replace}" _text "${_text}")
  set(bug_variant ${planted_root}/${bug_set}/${bug_lab}/${bug_name})
  # Written only when it changed: a new time stamp would compile the variant again on every configure.
  set(_out ${bug_variant}/${want_file})
  set(_old "")
  if(EXISTS ${_out})
    file(READ ${_out} _old)
  endif()
  if(NOT _old STREQUAL _text)
    file(WRITE ${_out} "${_text}")
  endif()
endmacro()
