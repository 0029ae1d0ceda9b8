# Every dependency comes from Debian packages. A missing one stops the configure step with the
# exact command that installs it (scripts/setup.sh installs them all).

macro(attn_require_package pkg debian)
  find_package(${pkg} ${ARGN} QUIET)
  if(NOT ${pkg}_FOUND)
    message(FATAL_ERROR
      "${pkg} not found. Install it with:\n  sudo apt-get install -y ${debian}\n"
      "(or run scripts/setup.sh, which installs every dependency).")
  endif()
endmacro()

attn_require_package(Eigen3 libeigen3-dev 3.4 NO_MODULE)
attn_require_package(CLI11 libcli11-dev CONFIG)
attn_require_package(nlohmann_json nlohmann-json3-dev 3.10 CONFIG)
attn_require_package(Boost libboost-context-dev 1.74 CONFIG COMPONENTS context)
if(ATTN_BUILD_TESTS)
  attn_require_package(Catch2 catch2 CONFIG)
endif()

find_path(RANDOM123_INCLUDE_DIR Random123/philox.h)
if(NOT RANDOM123_INCLUDE_DIR)
  message(FATAL_ERROR
    "Random123 not found. Install it with:\n  sudo apt-get install -y librandom123-dev\n"
    "(or run scripts/setup.sh, which installs every dependency).")
endif()
add_library(Random123 INTERFACE IMPORTED)
target_include_directories(Random123 SYSTEM INTERFACE ${RANDOM123_INCLUDE_DIR})

find_package(CUDAToolkit REQUIRED)
