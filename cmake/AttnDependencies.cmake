# Every dependency comes from Debian packages (scripts/setup.sh installs them all). A missing one
# stops the configure step with the exact command that installs it. `pip install .` needs none of
# them (pyproject.toml): Eigen and nlohmann-json come from PyPI as build requirements (cmeel-eigen,
# nlohmann-json), found below through the building Python; the Python package has no command line
# (CLI11) and, on x86-64 Linux, needs no Boost.Context (the CPU backend's own context switch).

macro(attn_require_package pkg debian)
  find_package(${pkg} ${ARGN} QUIET)
  if(NOT ${pkg}_FOUND)
    message(FATAL_ERROR
      "${pkg} not found. Install it with:\n  sudo apt-get install -y ${debian}\n"
      "(or run scripts/setup.sh, which installs every dependency).")
  endif()
endmacro()

# What the building Python prints for `code` (empty without a Python or on an error).
function(attn_python_says out code)
  set(said "")
  if(Python_EXECUTABLE)
    execute_process(COMMAND ${Python_EXECUTABLE} -c "${code}" OUTPUT_VARIABLE said
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  set(${out} "${said}" PARENT_SCOPE)
endfunction()

# `pip install .` builds in an environment of its own (the build requirements of pyproject.toml),
# made afresh by each pip run at a new path and with files newer than any object. Headers found
# there through the building Python are copied into the build directory, a file rewritten only
# where its content changed, so that a build directory kept between pip runs (`pip install .
# -C build-dir=build-pip`, docs/python.md) recompiles what changed, not everything for a moved
# header path.
# Sets `var` to the copy; elsewhere (a build from scripts/build.sh, .venv's headers) keeps it.
function(attn_keep_headers var name)
  if(NOT SKBUILD OR NOT IS_DIRECTORY "${${var}}")
    return()
  endif()
  set(copy ${CMAKE_BINARY_DIR}/external/${name})
  file(GLOB_RECURSE entries LIST_DIRECTORIES true RELATIVE "${${var}}" "${${var}}/*")
  foreach(entry IN LISTS entries)
    if(IS_DIRECTORY "${${var}}/${entry}")
      file(MAKE_DIRECTORY "${copy}/${entry}")
    else()
      get_filename_component(dir "${copy}/${entry}" DIRECTORY)
      file(MAKE_DIRECTORY "${dir}")
      file(COPY_FILE "${${var}}/${entry}" "${copy}/${entry}" ONLY_IF_DIFFERENT)
    endif()
  endforeach()
  set(${var} ${copy} PARENT_SCOPE)
endfunction()

# Eigen: Debian's, or cmeel-eigen's (Eigen's own CMake package under site-packages/cmeel.prefix).
find_package(Eigen3 3.4 NO_MODULE QUIET)
if(NOT Eigen3_FOUND)
  attn_python_says(cmeel_prefix "import os, sys; print(next((p for p in (os.path.join(d, 'cmeel.prefix') for d in sys.path) if os.path.isdir(p)), ''))")
  if(cmeel_prefix)
    find_package(Eigen3 3.4 NO_MODULE QUIET PATHS ${cmeel_prefix} NO_DEFAULT_PATH)
    if(Eigen3_FOUND)
      get_target_property(eigen_include Eigen3::Eigen INTERFACE_INCLUDE_DIRECTORIES)
      attn_keep_headers(eigen_include eigen3)
      set_target_properties(Eigen3::Eigen PROPERTIES
                            INTERFACE_INCLUDE_DIRECTORIES "${eigen_include}")
    endif()
  endif()
endif()
if(NOT Eigen3_FOUND)
  message(FATAL_ERROR "Eigen3 not found. Install it with:\n  sudo apt-get install -y libeigen3-dev\n"
                      "(or run scripts/setup.sh; `pip install .` brings it from PyPI, cmeel-eigen).")
endif()

# nlohmann-json: Debian's, or the PyPI package's headers (nlohmann_json.get_include()).
find_package(nlohmann_json 3.10 CONFIG QUIET)
if(NOT nlohmann_json_FOUND)
  attn_python_says(json_include "import nlohmann_json; print(nlohmann_json.get_include())")
  if(json_include AND EXISTS "${json_include}/nlohmann/json.hpp")
    attn_keep_headers(json_include nlohmann_json)
    add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
    target_include_directories(nlohmann_json::nlohmann_json SYSTEM INTERFACE ${json_include})
  else()
    message(FATAL_ERROR
      "nlohmann_json not found. Install it with:\n  sudo apt-get install -y nlohmann-json3-dev\n"
      "(or run scripts/setup.sh; `pip install .` brings it from PyPI, nlohmann-json).")
  endif()
endif()

# CLI11: the executables' command line (common/cli.cpp, suite/main.cpp). Without it (the Python
# package's build) the executables are not built; the tests need them.
find_package(CLI11 CONFIG QUIET)
set(ATTN_HAVE_CLI ${CLI11_FOUND})
if(NOT CLI11_FOUND)
  if(ATTN_BUILD_TESTS)
    attn_require_package(CLI11 libcli11-dev CONFIG)
  endif()
  message(NOTICE "CLI11 not found: the step executables are not built, only the libraries and the "
                 "Python package (sudo apt-get install -y libcli11-dev builds them)")
endif()

# Boost.Context: the CPU backend's fibers where its own context switch is not built (it is on
# x86-64 Linux), and SIMT_FIBER=boost anywhere.
find_package(Boost 1.74 CONFIG QUIET COMPONENTS context)
set(ATTN_HAVE_BOOST_CONTEXT ${Boost_FOUND})
if(NOT Boost_FOUND AND NOT (CMAKE_SYSTEM_NAME STREQUAL "Linux" AND
                            CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$"))
  attn_require_package(Boost libboost-context-dev 1.74 CONFIG COMPONENTS context)
endif()

# Boost.Preprocessor's headers: the wgmma wrappers of common/ptx.h spell out each shape's 8 to 128
# accumulator operands with them, in the sm_90a device pass alone. A GPU build for 90a needs them;
# without them it stops here in words, not in nvcc's pass for step 5.
if(ATTN_HAVE_GPU AND "${CMAKE_CUDA_ARCHITECTURES}" MATCHES "90a")
  find_path(ATTN_BOOST_PP_INCLUDE_DIR boost/preprocessor/repetition/repeat.hpp
            HINTS ${Boost_INCLUDE_DIRS})
  if(NOT ATTN_BOOST_PP_INCLUDE_DIR)
    message(FATAL_ERROR
      "CMAKE_CUDA_ARCHITECTURES holds 90a, whose wgmma wrappers (common/ptx.h) need Boost's "
      "headers (Boost.Preprocessor), not found. Install them (sudo apt-get install -y "
      "libboost-dev; brew install boost), or build without 90a, e.g. "
      "-DCMAKE_CUDA_ARCHITECTURES=\"75;80;89;120\" (pip install . -C "
      "cmake.define.CMAKE_CUDA_ARCHITECTURES=80): step 5 then runs its sm80 variant on Hopper.")
  endif()
  # Only a folder the compilers do not search already (-isystem /usr/include would break
  # #include_next in the C++ headers).
  if(NOT ATTN_BOOST_PP_INCLUDE_DIR IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES AND
     NOT ATTN_BOOST_PP_INCLUDE_DIR STREQUAL "/usr/include")
    include_directories(SYSTEM ${ATTN_BOOST_PP_INCLUDE_DIR})
  endif()
endif()

if(ATTN_BUILD_TESTS)
  attn_require_package(Catch2 catch2 CONFIG)
  # The tests hold common/philox.h (Philox4x32-10 and its floats, written from their definitions)
  # against Random123, the generator's authors' library; nothing else uses it.
  find_path(RANDOM123_INCLUDE_DIR Random123/philox.h)
  if(NOT RANDOM123_INCLUDE_DIR)
    message(FATAL_ERROR
      "Random123 not found. Install it with:\n  sudo apt-get install -y librandom123-dev\n"
      "(or run scripts/setup.sh, which installs every dependency).")
  endif()
  add_library(Random123 INTERFACE IMPORTED)
  target_include_directories(Random123 SYSTEM INTERFACE ${RANDOM123_INCLUDE_DIR})
endif()

# The CUDA headers that both halves use: the 16-bit float types (cuda_fp16.h, cuda_bf16.h) and
# dim3/uint3 (vector_types.h). A GPU build takes them from the toolkit. A CPU-only build takes
# them from the NVIDIA CUDA runtime wheels on PyPI (nvidia-cuda-runtime and the crt/ headers it
# includes, nvidia-cuda-crt: headers and no compiler),
# which scripts/setup.sh --python installs into .venv: it installs anywhere pip does, without the
# toolkit. ATTN_CUDA_INCLUDE_DIRS names the directory either way.
if(ATTN_HAVE_GPU)
  find_package(CUDAToolkit REQUIRED)
  set(ATTN_CUDA_INCLUDE_DIRS ${CUDAToolkit_INCLUDE_DIRS})
  set(ATTN_CUDA_VERSION ${CUDAToolkit_VERSION})
else()
  file(GLOB ATTN_CUDA_INCLUDE_DIRS LIST_DIRECTORIES true
       ${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/nvidia/cu13/include)
  if(ATTN_CUDA_INCLUDE_DIRS)
    list(GET ATTN_CUDA_INCLUDE_DIRS 0 ATTN_CUDA_INCLUDE_DIRS)
  elseif(Python_EXECUTABLE)
    # `pip install .`: the wheels are build requirements (pyproject.toml), installed where the
    # building Python imports them from.
    execute_process(
      COMMAND ${Python_EXECUTABLE} -c
              "import importlib.util as u, os; s = u.find_spec('nvidia'); print(next((os.path.join(d, 'cu13', 'include') for d in (s.submodule_search_locations if s else []) if all(os.path.isfile(os.path.join(d, 'cu13', 'include', f)) for f in ('cuda_fp16.h', 'crt/host_defines.h', 'nv/target'))), ''))"
      OUTPUT_VARIABLE ATTN_CUDA_INCLUDE_DIRS OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    attn_keep_headers(ATTN_CUDA_INCLUDE_DIRS cuda)
  endif()
  if(NOT ATTN_CUDA_INCLUDE_DIRS OR NOT EXISTS "${ATTN_CUDA_INCLUDE_DIRS}/cuda_fp16.h"
     OR NOT EXISTS "${ATTN_CUDA_INCLUDE_DIRS}/crt/host_defines.h"
     OR NOT EXISTS "${ATTN_CUDA_INCLUDE_DIRS}/nv/target")
    message(FATAL_ERROR
      "CPU-only build: the CUDA headers for the 16-bit types (cuda_fp16.h, cuda_bf16.h) are not in "
      ".venv. Install them with:\n  scripts/setup.sh --python\n"
      "(it pip-installs nvidia-cuda-runtime, nvidia-cuda-crt and nvidia-cuda-cccl, the headers "
      "without the toolkit, into .venv).")
  endif()
  set(ATTN_CUDA_VERSION "none")
endif()
