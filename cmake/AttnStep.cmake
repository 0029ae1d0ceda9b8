# Warning flags for the project's own code (third-party headers are SYSTEM includes).
set(ATTN_CXX_WARNINGS -Wall -Wextra -Wpedantic -Wno-unknown-pragmas)
set(ATTN_CUDA_WARNINGS -Xcompiler=-Wall,-Wextra --Werror=all-warnings)
# GCC 12 reports -Wrestrict inside libstdc++ for ordinary std::string concatenation (GCC bug
# 105329, fixed in GCC 13): a false positive, so that one diagnostic is off for GCC 12 only.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND ATTN_CXX_WARNINGS -Wno-restrict)
endif()
if(ATTN_WARNINGS_AS_ERRORS)
  list(APPEND ATTN_CXX_WARNINGS -Werror)
  list(APPEND ATTN_CUDA_WARNINGS -Xcompiler=-Werror)
endif()

function(attn_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${ATTN_CXX_WARNINGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:${ATTN_CUDA_WARNINGS}>)
endfunction()

# attn_add_step(<name> KERNEL <kernel.cu> INFO <step.cpp> MAIN <main.cpp>)
#
# Compiles the kernel file twice:
#   <name>_gpu: nvcc, for CMAKE_CUDA_ARCHITECTURES (namespace <step>::gpu); not in a CPU-only
#               build (ATTN_HAVE_GPU off), where the StepInfo's gpu entry is nullptr;
#   <name>_cpu: the host compiler against the SIMT backend (namespace <step>::cpu);
# and links both, with the step's StepInfo (INFO), into the library <name>_lib that the step's
# executable and the tests use. The executable picks a copy at run time (--backend).
function(attn_add_step name)
  cmake_parse_arguments(ARG "" "KERNEL;INFO;MAIN" "" ${ARGN})
  set(kernel ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_KERNEL})

  set(gpu_objects "")
  if(ATTN_HAVE_GPU)
    add_library(${name}_gpu OBJECT ${ARG_KERNEL})
    target_link_libraries(${name}_gpu PRIVATE attn_kernel_deps)
    # ptxas reports each kernel's registers, spills and shared memory; cmake/nvcc_capture.sh keeps
    # the report beside the object for scripts/kernel_report.py.
    target_compile_options(${name}_gpu PRIVATE --resource-usage)
    set_target_properties(${name}_gpu PROPERTIES
      CUDA_COMPILER_LAUNCHER ${PROJECT_SOURCE_DIR}/cmake/nvcc_capture.sh)
    attn_warnings(${name}_gpu)
    set(gpu_objects $<TARGET_OBJECTS:${name}_gpu>)
  endif()

  set(cpu_source ${CMAKE_CURRENT_BINARY_DIR}/${name}_cpu.cpp)
  file(CONFIGURE OUTPUT ${cpu_source} CONTENT
       "// Generated: ${ARG_KERNEL} compiled by the host compiler for the CPU SIMT backend.\n#include \"${kernel}\"\n")
  add_library(${name}_cpu OBJECT ${cpu_source})
  target_link_libraries(${name}_cpu PRIVATE attn_kernel_deps attn_simt)
  # CUDA code reinterprets memory freely (16-byte vector loads of half arrays); tell the host
  # compiler not to assume otherwise.
  target_compile_options(${name}_cpu PRIVATE -fno-strict-aliasing)
  attn_warnings(${name}_cpu)

  add_library(${name}_lib STATIC ${ARG_INFO} ${gpu_objects} $<TARGET_OBJECTS:${name}_cpu>)
  target_link_libraries(${name}_lib PUBLIC attn_common)
  attn_warnings(${name}_lib)

  add_executable(${name} ${ARG_MAIN})
  target_link_libraries(${name} PRIVATE ${name}_lib)
  attn_warnings(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endfunction()
