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
