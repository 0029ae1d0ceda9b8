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

# attn_cli_executable(<name> <main.cpp> <libraries>...): a program with the shared command line
# (attn_cli), in bin/. Not built without CLI11 (the Python package's build has no command line).
# attn_use_kernel_pch(<target> cpu|instrumented): <target>, a kernel's CPU or instrumented copy,
# compiles with the precompiled headers of common/CMakeLists.txt (where the compiler has them).
function(attn_use_kernel_pch target kind)
  if(TARGET attn_kernel_pch_${kind})
    target_precompile_headers(${target} REUSE_FROM attn_kernel_pch_${kind})
  endif()
endfunction()

function(attn_cli_executable name main)
  if(NOT ATTN_HAVE_CLI)
    return()
  endif()
  add_executable(${name} ${main})
  target_link_libraries(${name} PRIVATE ${ARGN} attn_cli)
  attn_warnings(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endfunction()

# attn_cuda_architectures_from(<out-var> <min>): the entries of CMAKE_CUDA_ARCHITECTURES from
# compute capability <min> (e.g. 80) on; "75" and "75-real" are below 80, "90a" and "120" are not.
# (The top-level CMakeLists.txt has refused names such as native or all-major.)
function(attn_cuda_architectures_from out min)
  set(kept "")
  foreach(arch ${CMAKE_CUDA_ARCHITECTURES})
    string(REGEX MATCH "^([0-9]+)" _ ${arch})
    if(CMAKE_MATCH_1 GREATER_EQUAL min)
      list(APPEND kept ${arch})
    endif()
  endforeach()
  set(${out} "${kept}" PARENT_SCOPE)
endfunction()

# attn_lowest_architecture(<out-var> <archs>): the lowest compute capability in <archs>, as
# machine code and portable PTX ("80-real" -> "80"; "90a" -> "90": PTX for 90a would run on
# sm_90a alone, and no rung needs more than its step's lowest architecture has).
function(attn_lowest_architecture out archs)
  set(lowest "")
  foreach(arch ${archs})
    string(REGEX MATCH "^([0-9]+)" _ ${arch})
    if(lowest STREQUAL "" OR CMAKE_MATCH_1 LESS lowest)
      set(lowest ${CMAKE_MATCH_1})
    endif()
  endforeach()
  set(${out} ${lowest} PARENT_SCOPE)
endfunction()

# attn_add_step(<name> KERNEL <kernel.cu> INFO <step.cpp> MAIN <main.cpp> [MIN_ARCH <cc>]
#               [HOPPER_KERNEL <kernel_sm90a.cu>] [RUNGS <rung1.cu> ...]
#               [HOPPER_RUNGS <rung1.cu> ...])
#
# Compiles the kernel file twice:
#   <name>_gpu: nvcc, for CMAKE_CUDA_ARCHITECTURES (namespace <step>::gpu), those from MIN_ARCH
#               on when it is given (80: steps 4 and 5, whose StepInfo::min_arch says so); not in
#               a CPU-only build (ATTN_HAVE_GPU off), nor when no architecture is left: the
#               INFO file then sees ATTN_STEP_GPU=0 and its gpu entry is attn::gpu_not_built;
#   <name>_cpu: the host compiler against the SIMT backend (namespace <step>::cpu);
# and links both, with the step's StepInfo (INFO), into the library <name>_lib that the step's
# executable and the tests use. The executable picks a copy at run time (--backend).
# HOPPER_KERNEL: a second kernel file that only sm_90a can run (wgmma, TMA, setmaxnreg). Its CPU
# copy is always built; its GPU copy (<name>_sm90a_gpu) only when CMAKE_CUDA_ARCHITECTURES holds
# 90a, and for that architecture alone. The INFO file sees ATTN_HAVE_SM90A (1 or 0).
# RUNGS: the earlier rungs of a step whose lesson is a ladder (each a complete kernel file, in its
# own namespace <step>::rungN); compiled as the kernel file is, into the same libraries, but their
# GPU copies (<name>_rungs_gpu) for the lowest of the step's architectures alone, as machine code
# and PTX: the driver compiles that PTX for any newer GPU when a rung first runs there. A rung is
# a lesson, run to compare it with its neighbours; the step's own kernel is the one that gets
# machine code for every architecture (docs/gpus.md: what that saves of the build).
# HOPPER_RUNGS: the same for a ladder that leads to the HOPPER_KERNEL: their GPU copies are built
# with it, for sm_90a alone.
function(attn_add_step name)
  cmake_parse_arguments(ARG "" "KERNEL;INFO;MAIN;HOPPER_KERNEL;MIN_ARCH" "RUNGS;HOPPER_RUNGS"
                        ${ARGN})
  set(kernel ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_KERNEL})
  set(have_sm90a 0)
  if(ATTN_HAVE_GPU AND ARG_HOPPER_KERNEL AND "90a" IN_LIST CMAKE_CUDA_ARCHITECTURES)
    set(have_sm90a 1)
  endif()
  set(step_gpu 0)
  if(ATTN_HAVE_GPU)
    set(step_archs ${CMAKE_CUDA_ARCHITECTURES})
    if(ARG_MIN_ARCH)
      attn_cuda_architectures_from(step_archs ${ARG_MIN_ARCH})
    endif()
    if(step_archs)
      set(step_gpu 1)
    else()
      message(NOTICE "${name}: no GPU code (it needs sm_${ARG_MIN_ARCH} or newer, and "
                     "CMAKE_CUDA_ARCHITECTURES is ${CMAKE_CUDA_ARCHITECTURES}): CPU backend only")
    endif()
  endif()

  set(gpu_objects "")
  if(step_gpu)
    attn_lowest_architecture(rung_arch "${step_archs}")
    set(gpu_targets ${name}_gpu)
    add_library(${name}_gpu OBJECT ${ARG_KERNEL})
    set_target_properties(${name}_gpu PROPERTIES CUDA_ARCHITECTURES "${step_archs}")
    # nvcc compiles a file's architectures one after another unless told otherwise; with
    # --threads 0 it compiles them side by side, as many at once as the machine has cores. The
    # same machine code and the same ptxas report (in another order: kernel_report.py sorts it),
    # and no faster a whole build, where ninja keeps every core busy already; but a step rebuilt
    # after an edit waits for its architectures a core's worth at a time instead of one by one
    # (docs/contributing.md's edit-loop table).
    target_compile_options(${name}_gpu PRIVATE --threads 0)
    if(ARG_RUNGS)
      add_library(${name}_rungs_gpu OBJECT ${ARG_RUNGS})
      set_target_properties(${name}_rungs_gpu PROPERTIES CUDA_ARCHITECTURES ${rung_arch})
      list(APPEND gpu_targets ${name}_rungs_gpu)
    endif()
    foreach(target ${gpu_targets})
      target_link_libraries(${target} PRIVATE attn_kernel_deps)
      # ptxas reports each kernel's registers, spills and shared memory; cmake/nvcc_capture.sh
      # keeps the report beside the object for scripts/kernel_report.py.
      target_compile_options(${target} PRIVATE --resource-usage)
      set_target_properties(${target} PROPERTIES
        CUDA_COMPILER_LAUNCHER ${PROJECT_SOURCE_DIR}/cmake/nvcc_capture.sh)
      attn_warnings(${target})
      list(APPEND gpu_objects $<TARGET_OBJECTS:${target}>)
    endforeach()
  endif()
  if(have_sm90a)
    add_library(${name}_sm90a_gpu OBJECT ${ARG_HOPPER_KERNEL} ${ARG_HOPPER_RUNGS})
    target_link_libraries(${name}_sm90a_gpu PRIVATE attn_kernel_deps)
    target_compile_options(${name}_sm90a_gpu PRIVATE --resource-usage)
    set_target_properties(${name}_sm90a_gpu PROPERTIES CUDA_ARCHITECTURES 90a
      CUDA_COMPILER_LAUNCHER ${PROJECT_SOURCE_DIR}/cmake/nvcc_capture.sh)
    attn_warnings(${name}_sm90a_gpu)
    list(APPEND gpu_objects $<TARGET_OBJECTS:${name}_sm90a_gpu>)
  endif()

  set(cpu_source ${CMAKE_CURRENT_BINARY_DIR}/${name}_cpu.cpp)
  file(CONFIGURE OUTPUT ${cpu_source} CONTENT
       "// Generated: ${ARG_KERNEL} compiled by the host compiler for the CPU SIMT backend.\n#include \"${kernel}\"\n")
  if(ARG_HOPPER_KERNEL)
    set(hopper_source ${CMAKE_CURRENT_BINARY_DIR}/${name}_sm90a_cpu.cpp)
    file(CONFIGURE OUTPUT ${hopper_source} CONTENT
         "// Generated: ${ARG_HOPPER_KERNEL} compiled by the host compiler for the CPU SIMT backend.\n#include \"${CMAKE_CURRENT_SOURCE_DIR}/${ARG_HOPPER_KERNEL}\"\n")
    list(APPEND cpu_source ${hopper_source})
  endif()
  foreach(rung ${ARG_RUNGS} ${ARG_HOPPER_RUNGS})
    get_filename_component(stem ${rung} NAME_WE)
    set(rung_source ${CMAKE_CURRENT_BINARY_DIR}/${name}_${stem}_cpu.cpp)
    file(CONFIGURE OUTPUT ${rung_source} CONTENT
         "// Generated: ${rung} compiled by the host compiler for the CPU SIMT backend.\n#include \"${CMAKE_CURRENT_SOURCE_DIR}/${rung}\"\n")
    list(APPEND cpu_source ${rung_source})
  endforeach()
  add_library(${name}_cpu OBJECT ${cpu_source})
  target_link_libraries(${name}_cpu PRIVATE attn_kernel_deps attn_simt)
  # CUDA code reinterprets memory freely (16-byte vector loads of half arrays); tell the host
  # compiler not to assume otherwise. With g++, the kernels' CPU copies at -O1
  # (-findirect-inlining: the kernels pass always-inline functions such as attn::exp2_ftz as
  # arguments): each compiles in about half the time, and runs as fast, because a kernel on the
  # CPU backend spends its time in the backend (fibers, barriers, the mma emulation; common/simt,
  # at the build's optimisation): step 4's own kernel at S = 1000, D = 128 took 424 and 435 ms at
  # -O3 and -O1, 150 and 138 ms at S = 512 with dropout. The counted copies below get -O1 too.
  target_compile_options(${name}_cpu PRIVATE -fno-strict-aliasing ${attn_kernel_copy_flags})
  attn_use_kernel_pch(${name}_cpu cpu)
  attn_warnings(${name}_cpu)

  add_library(${name}_lib STATIC ${ARG_INFO} ${gpu_objects} $<TARGET_OBJECTS:${name}_cpu>)
  target_link_libraries(${name}_lib PUBLIC attn_common)
  set(have_counters 0)
  if(ATTN_COUNTERS)
    set(have_counters 1)
  endif()
  set_source_files_properties(${ARG_INFO} PROPERTIES COMPILE_DEFINITIONS
                              "ATTN_HAVE_SM90A=${have_sm90a};ATTN_HAVE_COUNTERS=${have_counters};ATTN_STEP_GPU=${step_gpu}")
  attn_warnings(${name}_lib)

  attn_cli_executable(${name} ${ARG_MAIN} ${name}_lib)

  # The counted copy (--counters, common/simt/counters.h): the CPU copy compiled once more with
  # every load and store instrumented (ATTN_INSTRUMENT_FLAGS), in namespace <step>::counted; the
  # instrumented tests run it too. bin/counted/<name> links it; bin/<name> --counters runs that.
  if(ATTN_COUNTERS)
    set(counted_sources)
    foreach(file ${ARG_KERNEL} ${ARG_HOPPER_KERNEL} ${ARG_RUNGS} ${ARG_HOPPER_RUNGS})
      get_filename_component(stem ${file} NAME_WE)
      set(counted_source ${CMAKE_CURRENT_BINARY_DIR}/${name}_${stem}_counted.cpp)
      file(CONFIGURE OUTPUT ${counted_source} CONTENT
           "// Generated: ${file} compiled for the CPU SIMT backend, every access counted.\n#include \"${CMAKE_CURRENT_SOURCE_DIR}/${file}\"\n")
      list(APPEND counted_sources ${counted_source})
    endforeach()
    add_library(${name}_counted OBJECT ${counted_sources})
    target_link_libraries(${name}_counted PRIVATE attn_kernel_deps attn_simt)
    target_compile_definitions(${name}_counted PRIVATE ATTN_BACKEND_NS=counted)
    # At -O1, as the CPU copies above: the instrumentation keeps every access the source makes at
    # its width either way, so the counts are the same (step 4's, byte for byte, at -O3 and -O1).
    target_compile_options(${name}_counted PRIVATE -fno-strict-aliasing ${ATTN_INSTRUMENT_FLAGS}
                                                   ${attn_kernel_copy_flags})
    attn_use_kernel_pch(${name}_counted instrumented)
    attn_warnings(${name}_counted)
    if(ATTN_HAVE_CLI)
      add_executable(${name}_counted_bin ${ARG_MAIN} $<TARGET_OBJECTS:${name}_counted>)
      target_link_libraries(${name}_counted_bin PRIVATE ${name}_lib attn_cli)
      attn_warnings(${name}_counted_bin)
      set_target_properties(${name}_counted_bin PROPERTIES OUTPUT_NAME ${name}
                            RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin/counted)
    endif()
  endif()
endfunction()

# ---- The instrumented build: every load and store of a kernel checked and counted ---------------
#
# GCC's ThreadSanitizer and UBSan alignment instrumentation, compiled in but linked without their
# runtimes: the calls land in common/simt/checks.cpp, which checks shared and device memory bounds,
# alignment, pending cp.async destinations and intra-warp store visibility, counts the access
# (common/simt/counters.h), and reports the kernel's source line (hence -g: addr2line reads it).
# -O2 without scalar replacement of aggregates or vectorisation: an access keeps the width the
# source gives it (a uint4 copy stays one 16-byte access instead of four 4-byte ones, and a loop
# of 2-byte loads is not merged into vector loads), which is what the counters count.
# -fno-var-tracking: addr2line needs the line tables and the inlining records, not where each
# variable lives (a fifth of these copies' compile time).
set(ATTN_INSTRUMENT_FLAGS -g -fno-var-tracking -fsanitize=thread,alignment
    -fno-sanitize-recover=alignment -O2 -fno-tree-sra -fno-ipa-sra -fno-tree-vectorize
    -fno-tree-slp-vectorize)

# attn_instrumented_kernel(<target> <kernel-file> [ONE_SHAPE])
# An object library: the CPU copy of <kernel-file> (namespace <step>::cpu), instrumented.
# ONE_SHAPE: bf16 at head dim 64 only, as attn_planted_kernel below (for a copy with a planted bug).
function(attn_instrumented_kernel target kernel)
  cmake_parse_arguments(ARG "ONE_SHAPE" "" "" ${ARGN})
  set(wrapper ${CMAKE_CURRENT_BINARY_DIR}/${target}.cpp)
  file(CONFIGURE OUTPUT ${wrapper} CONTENT
       "// Generated: ${kernel} compiled for the CPU SIMT backend with every access checked.\n#include \"${kernel}\"\n")
  add_library(${target} OBJECT ${wrapper})
  target_link_libraries(${target} PRIVATE attn_kernel_deps attn_simt)
  # At -O1, as the steps' counted copies (attn_add_step): the same accesses checked and counted.
  target_compile_options(${target} PRIVATE -fno-strict-aliasing ${ATTN_INSTRUMENT_FLAGS}
                                           ${attn_kernel_copy_flags})
  attn_use_kernel_pch(${target} instrumented)
  if(ARG_ONE_SHAPE)
    target_compile_definitions(${target} PRIVATE ATTN_ONLY_HEAD_DIM=64 ATTN_ONLY_BF16=1)
  endif()
  attn_warnings(${target})
endfunction()

# attn_planted_kernel(<target> <kernel-file> [HEAD_DIM <d>])
# An object library: the CPU copy of <kernel-file>, for bf16 at head dim 64 (or <d>) only
# (ATTN_ONLY_BF16, ATTN_ONLY_HEAD_DIM: common/kernel.h, common/tiles.h). For a copy with a planted
# bug that one shape family exposes: an eighth of the step's instantiations, so it builds quickly.
function(attn_planted_kernel target kernel)
  cmake_parse_arguments(ARG "" "HEAD_DIM" "" ${ARGN})
  if(NOT ARG_HEAD_DIM)
    set(ARG_HEAD_DIM 64)
  endif()
  set(wrapper ${CMAKE_CURRENT_BINARY_DIR}/${target}.cpp)
  file(CONFIGURE OUTPUT ${wrapper} CONTENT
       "// Generated: ${kernel} compiled for the CPU SIMT backend, bf16 at head dim ${ARG_HEAD_DIM} only.\n#include \"${kernel}\"\n")
  add_library(${target} OBJECT ${wrapper})
  target_link_libraries(${target} PRIVATE attn_kernel_deps attn_simt)
  target_compile_definitions(${target} PRIVATE ATTN_ONLY_HEAD_DIM=${ARG_HEAD_DIM} ATTN_ONLY_BF16=1)
  # The kernels' copies' flags (attn_add_step): a planted bug is found the same at any
  # optimisation.
  target_compile_options(${target} PRIVATE -fno-strict-aliasing ${attn_kernel_copy_flags})
  attn_use_kernel_pch(${target} cpu)
  attn_warnings(${target})
endfunction()

# attn_planted_copy(<out-file> <source> REPLACE <from> <to> [<from> <to>]...)
# Writes a copy of <source> with each <from> replaced by <to>: a kernel with a planted bug for the
# tests, made from the step's current source so that it never drifts from it. Every <from> must
# occur (a changed source fails the configure step instead of silently planting nothing). The
# copy keeps the source's line numbers as long as no replacement adds a line. A ';' (CMake's list
# separator) is written <semicolon> in <from> and <to>.
function(attn_planted_copy out src)
  cmake_parse_arguments(ARG "" "" "REPLACE" ${ARGN})
  file(READ ${src} text)
  list(LENGTH ARG_REPLACE n)
  math(EXPR last "${n} - 1")
  foreach(i RANGE 0 ${last} 2)
    math(EXPR j "${i} + 1")
    list(GET ARG_REPLACE ${i} from)
    list(GET ARG_REPLACE ${j} to)
    string(REPLACE "<semicolon>" ";" from "${from}")
    string(REPLACE "<semicolon>" ";" to "${to}")
    string(FIND "${text}" "${from}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "attn_planted_copy: '${from}' not found in ${src}")
    endif()
    string(REPLACE "${from}" "${to}" text "${text}")
  endforeach()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${src})
  file(WRITE ${out}.tmp "${text}")
  configure_file(${out}.tmp ${out} COPYONLY)
endfunction()

# attn_add_figures(<target> <source>): a program that prints a chapter's figures
# (scripts/figures.py), drawn from the step's own kernel files, which <source> includes and runs
# on the CPU backend: built for bf16 at head dim 64 alone (common/kernel.h), at the copies' -O1.
function(attn_add_figures target source)
  add_executable(${target} ${source})
  target_link_libraries(${target} PRIVATE attn_common attn_kernel_deps attn_simt)
  target_compile_definitions(${target} PRIVATE ATTN_BACKEND_NS=figures ATTN_ONLY_BF16=1
                                               ATTN_ONLY_HEAD_DIM=64 ${ARGN})
  target_compile_options(${target} PRIVATE -fno-strict-aliasing
                                           $<$<CXX_COMPILER_ID:GNU>:-O1;-findirect-inlining>)
  attn_warnings(${target})
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endfunction()
