// Which C++ runtime this process's std::filesystem runs in. PyPI's torch wheels export their own
// copy of std::filesystem, and a program binds to the first library that defines a symbol; the kit
// links the shared C++ runtime first (cmake/Flags.cmake). LibTorch-free, so the grader's front end
// and doctor can check it before anything else.
#pragma once

#include <string>

namespace ddplab::sys {

/// The file of the library that this process's std::filesystem calls run in (what the dynamic
/// loader binds std::filesystem::remove_all to), e.g. /usr/lib/x86_64-linux-gnu/libstdc++.so.6.
/// PyPI's torch wheels export a copy of std::filesystem; the kit links the C++ runtime first so
/// that its own is used (cmake/Flags.cmake), and this says whether that worked.
std::string std_filesystem_library();
/// Throws ddplab::Error when std_filesystem_library() is not the C++ runtime (libstdc++), naming
/// the library and the fix: torch 2.11's copy of remove_all jumps to address 0 under GCC 12's runtime.
void require_std_filesystem_from_runtime();

}  // namespace ddplab::sys
