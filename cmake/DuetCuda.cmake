# The CUDA backend's build switch (DUET_CUDA = AUTO | ON | OFF).
# Sets DUET_HAVE_CUDA, DUET_CUDA_LIBS (what the library links) and
# DUET_CUDA_INCLUDE_DIRS (for the .c files that call the runtime and the
# libraries), and enables the CUDA language for src/**/*.cu.
#
# AUTO builds the backend when nvcc, cuBLAS/cuBLASLt, cuDNN and NCCL are all
# found and says which is missing otherwise; ON fails without them; OFF is
# the CPU-only build. The sanitizer build leaves CUDA out under AUTO: ASan
# and the CUDA driver do not mix, and the CPU code is what it checks.
set(DUET_HAVE_CUDA OFF)
set(DUET_CUDA_LIBS "")
set(DUET_PC_CUDA_LIBS "") # for duet.pc's static link line
set(DUET_CUDA_INCLUDE_DIRS "")
string(TOUPPER "${DUET_CUDA}" duet_cuda_mode)
if(NOT duet_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "DUET_CUDA=${DUET_CUDA}: use AUTO, ON or OFF")
endif()

function(duet_cuda_missing what)
  if(duet_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "DUET_CUDA=ON but ${what}")
  endif()
  message(STATUS "CUDA backend: off (${what})")
endfunction()

if(duet_cuda_mode STREQUAL "OFF")
  message(STATUS "CUDA backend: off (DUET_CUDA=OFF)")
  return()
endif()
if(DUET_SANITIZE AND duet_cuda_mode STREQUAL "AUTO")
  message(STATUS "CUDA backend: off (the sanitizer build; DUET_CUDA=ON forces it)")
  return()
endif()

include(CheckLanguage)
if(NOT CMAKE_CUDA_COMPILER)
  # CheckLanguage does not look at /usr/local/cuda unless nvcc is on PATH.
  find_program(DUET_NVCC nvcc HINTS ENV CUDACXX ENV CUDA_PATH PATH_SUFFIXES bin
    PATHS /usr/local/cuda/bin)
  if(DUET_NVCC)
    set(CMAKE_CUDA_COMPILER ${DUET_NVCC})
  endif()
endif()
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  duet_cuda_missing("no CUDA compiler (nvcc) was found")
  return()
endif()
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cublasLt)
  duet_cuda_missing("the CUDA toolkit's runtime or cuBLASLt was not found")
  return()
endif()
find_path(DUET_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
find_library(DUET_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
find_path(DUET_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
find_library(DUET_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
if(NOT DUET_CUDNN_INCLUDE_DIR OR NOT DUET_CUDNN_LIBRARY)
  duet_cuda_missing("cuDNN (cudnn.h, libcudnn) was not found")
  return()
endif()
if(NOT DUET_NCCL_INCLUDE_DIR OR NOT DUET_NCCL_LIBRARY)
  duet_cuda_missing("NCCL (nccl.h, libnccl) was not found")
  return()
endif()

# SASS for every architecture listed, PTX for the last (later GPUs JIT it).
set(duet_archs "")
foreach(a ${DUET_CUDA_ARCHITECTURES})
  list(APPEND duet_archs "${a}-real")
endforeach()
list(GET DUET_CUDA_ARCHITECTURES -1 duet_last_arch)
list(APPEND duet_archs "${duet_last_arch}-virtual")
set(CMAKE_CUDA_ARCHITECTURES "${duet_archs}")
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_FLAGS_RELEASE "-O3 -DNDEBUG")
# Host code of .cu files warns as the C code does. No fused multiply-adds:
# the kernels run ops_math.h's arithmetic as the CPU does (gcc contracts
# none in ISO C mode), so Adam and the rectifiers match the CPU bit for bit;
# they are memory-bound, the FMAs would buy nothing.
string(APPEND CMAKE_CUDA_FLAGS " -Xcompiler=-Wall,-Wextra --fmad=false")

set(DUET_HAVE_CUDA ON)
set(DUET_CUDA_LIBS CUDA::cudart_static CUDA::cublasLt CUDA::cublas ${DUET_CUDNN_LIBRARY}
  ${DUET_NCCL_LIBRARY})
get_filename_component(duet_cudnn_dir ${DUET_CUDNN_LIBRARY} DIRECTORY)
get_filename_component(duet_nccl_dir ${DUET_NCCL_LIBRARY} DIRECTORY)
set(DUET_PC_CUDA_LIBS "-L${CUDAToolkit_LIBRARY_DIR} -L${duet_cudnn_dir} -L${duet_nccl_dir} -lcudart_static -lcublasLt -lcublas -lcudnn -lnccl -lstdc++ -ldl -lrt")
set(DUET_CUDA_INCLUDE_DIRS ${CUDAToolkit_INCLUDE_DIRS} ${DUET_CUDNN_INCLUDE_DIR}
  ${DUET_NCCL_INCLUDE_DIR})
message(STATUS "CUDA backend: on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures "
  "${CMAKE_CUDA_ARCHITECTURES}, cuDNN ${DUET_CUDNN_LIBRARY}, NCCL ${DUET_NCCL_LIBRARY})")
