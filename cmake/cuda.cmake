# The CUDA backend (docs/cuda.md): the static library edgegemma_cuda from src/backend/cuda,
# its tests (tests/cuda_kernels_test.cpp, label "cuda") and bench/cuda. Sets EG_CUDA_ENABLED.
#   -DEDGEGEMMA_CUDA=AUTO (default): on when check_language(CUDA) finds a working CUDA compiler
#   -DEDGEGEMMA_CUDA=ON / OFF:       required / never
#   -DCMAKE_CUDA_ARCHITECTURES=...:  default 90 (H100/H200, sm_90 machine code + compute_90 PTX)
# With no CUDA compiler and AUTO, nothing here changes the CPU build.
set(EG_CUDA_ENABLED OFF)
string(TOUPPER "${EDGEGEMMA_CUDA}" EG_CUDA_MODE)
if(EG_CUDA_MODE STREQUAL "ON")
  set(EG_CUDA_ENABLED ON)
elseif(EG_CUDA_MODE STREQUAL "AUTO")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(EG_CUDA_ENABLED ON)
  endif()
elseif(NOT EG_CUDA_MODE STREQUAL "OFF")
  message(FATAL_ERROR "EDGEGEMMA_CUDA must be AUTO, ON or OFF (got '${EDGEGEMMA_CUDA}')")
endif()

if(NOT EG_CUDA_ENABLED)
  message(STATUS "CUDA backend: off (EDGEGEMMA_CUDA=${EDGEGEMMA_CUDA})")
  return()
endif()

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
message(STATUS "CUDA backend: on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES})")

file(GLOB EG_CUDA_SOURCES CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cu ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cpp)
add_library(edgegemma_cuda STATIC ${EG_CUDA_SOURCES} ${PROJECT_SOURCE_DIR}/src/exec/cuda_executor.cpp
  ${PROJECT_SOURCE_DIR}/src/exec/cuda_executor_steps.cpp ${PROJECT_SOURCE_DIR}/src/exec/cuda_executor_prefill.cpp
  ${PROJECT_SOURCE_DIR}/src/exec/cuda_persistent.cpp)
set_target_properties(edgegemma_cuda PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
  POSITION_INDEPENDENT_CODE ON)
target_compile_options(edgegemma_cuda PRIVATE
  "$<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=--warn-on-spills;-Xcompiler=-Wall>")
target_link_libraries(edgegemma_cuda PUBLIC edgegemma_core CUDA::cudart_static CUDA::cublas)


# The engine reaches the CUDA executor through make_executor (src/exec/executor.cpp, compiled with
# EG_HAVE_CUDA; only that file, so every other object is the CPU build's). edgegemma_core and
# edgegemma_cuda then depend on each other (static libraries: CMake repeats them on the link line).
set_source_files_properties(${PROJECT_SOURCE_DIR}/src/exec/executor.cpp PROPERTIES COMPILE_DEFINITIONS EG_HAVE_CUDA)
target_link_libraries(edgegemma_core PUBLIC edgegemma_cuda)
target_link_libraries(edgegemma_c PRIVATE edgegemma_cuda)
