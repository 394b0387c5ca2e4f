# Test registration by convention, so that adding a test is adding a file:
#   tests/unit/test_*.c       one cmocka program each, run once
#   tests/unit/test_ref_*.c   also need the PyTorch reference files
#   tests/mpi/test_*.c        run under mpiexec -n 1, 2 and 3
#   examples/*.c              built and run as tests
# Reference files are written by tests/ref/gen_refs.py (Debian's
# python3-torch) into ${CMAKE_BINARY_DIR}/ref as safetensors files; the C
# tests read DUET_REF_DIR.
pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)

set(DUET_REF_DIR ${CMAKE_BINARY_DIR}/ref)
add_test(NAME gen_refs
  COMMAND ${DUET_PYTHON} ${PROJECT_SOURCE_DIR}/tests/ref/gen_refs.py ${DUET_REF_DIR})
set_tests_properties(gen_refs PROPERTIES FIXTURES_SETUP refs TIMEOUT 600)

set(DUET_MPI_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_rmaps_base_oversubscribe=1 DUET_REF_DIR=${DUET_REF_DIR}
  DUET_SOURCE_DIR=${PROJECT_SOURCE_DIR} DUET_BINARY_DIR=${CMAKE_BINARY_DIR})

add_library(duet_testutil STATIC ${PROJECT_SOURCE_DIR}/tests/testutil.c)
target_link_libraries(duet_testutil PUBLIC duet_static PkgConfig::CMOCKA)
target_include_directories(duet_testutil PUBLIC ${PROJECT_SOURCE_DIR}/tests ${PROJECT_SOURCE_DIR}/src)

file(GLOB DUET_UNIT_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/unit/test_*.c)
foreach(src ${DUET_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE duet_testutil)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${DUET_MPI_ENV}" TIMEOUT 600 LABELS unit)
  if(name MATCHES "^test_ref_")
    set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED refs LABELS "unit;ref")
  endif()
endforeach()

file(GLOB DUET_MPI_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/mpi/test_*.c)
foreach(src ${DUET_MPI_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE duet_testutil)
  foreach(np 1 2 3)
    add_test(NAME ${name}_np${np}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
              ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${name}_np${np} PROPERTIES ENVIRONMENT "${DUET_MPI_ENV}"
      TIMEOUT 300 LABELS mpi FIXTURES_REQUIRED refs)
  endforeach()
endforeach()

file(GLOB DUET_EXAMPLES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/examples/*.c)
foreach(src ${DUET_EXAMPLES})
  get_filename_component(name ${src} NAME_WE)
  add_executable(example_${name} ${src})
  target_link_libraries(example_${name} PRIVATE duet_static)
  add_test(NAME example_${name}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe $<TARGET_FILE:example_${name}>)
  set_tests_properties(example_${name} PROPERTIES ENVIRONMENT "${DUET_MPI_ENV}" TIMEOUT 300 LABELS example)
endforeach()

# Extra tests written as CMake/shell scripts (end-to-end runs of the CLI).
file(GLOB DUET_SCRIPT_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/e2e/test_*.sh)
foreach(src ${DUET_SCRIPT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_test(NAME e2e_${name} COMMAND bash ${src})
  set_tests_properties(e2e_${name} PROPERTIES ENVIRONMENT "${DUET_MPI_ENV};DUET_EXE=$<TARGET_FILE:duet_cli>" TIMEOUT 900 LABELS e2e)
endforeach()
