# COLI_CUDA: AUTO (default) builds the CUDA kernels when nvcc is found and
# works with this host compiler; ON requires them; OFF never builds them.
# The CUDA runtime is linked statically (cudart_static opens libcuda.so at the
# first CUDA call), so every binary still starts on a machine without the
# driver, and that first call returns an error instead.
set(COLI_CUDA AUTO CACHE STRING "Build the CUDA kernels: AUTO (when nvcc is found), ON or OFF")
set_property(CACHE COLI_CUDA PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${COLI_CUDA}" coli_cuda_mode)
set(COLI_CUDA_ENABLED OFF)

if(NOT coli_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "COLI_CUDA is '${COLI_CUDA}'; use AUTO, ON or OFF")
endif()

if(NOT coli_cuda_mode STREQUAL "OFF")
  # Where nvcc is: -DCMAKE_CUDA_COMPILER (or $CUDACXX) as given, else the
  # toolkit's usual home, else nvcc on PATH.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    if(EXISTS /usr/local/cuda/bin/nvcc)
      set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)
    else()
      find_program(COLI_NVCC nvcc)
      if(COLI_NVCC)
        set(ENV{CUDACXX} ${COLI_NVCC})
      endif()
    endif()
  endif()
  # nvcc compiles host code with the project's C++ compiler (GCC 12 here, 13
  # on the GPU machine: both supported by nvcc 13, no -allow-unsupported-compiler).
  # Passed through the environment so the trial configure below sees it too.
  if(NOT CMAKE_CUDA_HOST_COMPILER AND NOT DEFINED ENV{CUDAHOSTCXX})
    set(ENV{CUDAHOSTCXX} ${CMAKE_CXX_COMPILER})
  endif()
  if(coli_cuda_mode STREQUAL "AUTO" AND NOT CMAKE_CUDA_COMPILER)
    # A trial configure in a sub-project: an nvcc that rejects this host
    # compiler leaves AUTO without CUDA instead of failing the configure.
    include(CheckLanguage)
    check_language(CUDA)
  elseif(NOT CMAKE_CUDA_COMPILER AND DEFINED ENV{CUDACXX})
    set(CMAKE_CUDA_COMPILER $ENV{CUDACXX})
  endif()
  if(CMAKE_CUDA_COMPILER)
    set(COLI_CUDA_ENABLED ON)
  elseif(coli_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "COLI_CUDA=ON but no usable nvcc was found (looked at CMAKE_CUDA_COMPILER, $CUDACXX, "
                        "/usr/local/cuda/bin/nvcc and PATH): install the CUDA toolkit 12 or 13 (nvcc, cudart) "
                        "from NVIDIA, or pass -DCMAKE_CUDA_COMPILER=/path/to/nvcc, or -DCOLI_CUDA=OFF")
  else()
    message(STATUS "CUDA kernels: not built (COLI_CUDA=AUTO and no usable nvcc; install the CUDA toolkit for them)")
  endif()
endif()

if(COLI_CUDA_ENABLED)
  # sm_75 is the oldest architecture nvcc 13 compiles for; 90 is the H200.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 75 90 CACHE STRING "CUDA architectures to compile for")
  endif()
  if(CMAKE_CXX_COMPILER_LAUNCHER AND NOT DEFINED CMAKE_CUDA_COMPILER_LAUNCHER)
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${CMAKE_CXX_COMPILER_LAUNCHER})  # ccache caches nvcc too
  endif()
  set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "CUDA kernels: built with nvcc ${CMAKE_CUDA_COMPILER_VERSION} for sm ${CMAKE_CUDA_ARCHITECTURES}")
elseif(coli_cuda_mode STREQUAL "OFF")
  message(STATUS "CUDA kernels: not built (COLI_CUDA=OFF)")
endif()
