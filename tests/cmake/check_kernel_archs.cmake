# ctest Build.KernelsContainEveryArchitecture: `cuobjdump --list-elf` on the kernel library must list
# an sm_XY cubin for every XY in ARCHS (comma list), so a GPU of each listed kind finds its kernels.
# Without cuobjdump, the architecture names the fatbinary holds (sm_XY per cubin) are read directly.
if(CUOBJDUMP)
  execute_process(COMMAND ${CUOBJDUMP} --list-elf ${LIBRARY} OUTPUT_VARIABLE listing ERROR_VARIABLE err
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cuobjdump --list-elf ${LIBRARY} failed (${rc}): ${err}")
  endif()
else()
  message(STATUS "cuobjdump not found: reading the cubin names in ${LIBRARY}")
  file(STRINGS ${LIBRARY} names REGEX "sm_[0-9][0-9]")
  string(REPLACE ";" "\n" listing "${names}\n")
endif()
string(REPLACE "," ";" archs "${ARCHS}")
set(missing "")
foreach(arch ${archs})
  if(NOT listing MATCHES "sm_${arch}[^0-9a]")
    list(APPEND missing sm_${arch})
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "the kernel library has no machine code for ${missing} (built: ${ARCHS}); "
                      "listing:\n${listing}")
endif()
list(LENGTH archs n)
message(STATUS "kernel library holds machine code for all ${n} architectures: ${ARCHS}")
