# Included by CMakeLists.txt after it globbed LMSCALE_KERNEL_SOURCES (src/kernels/*.cu).
# FlashAttention-2 instantiations are the files flash_{fwd,bwd}_hdim<D>_<dtype>.cu, written by
# src/kernels/generate_flash_kernels.py from the one list of head dims (it writes that list as
# kernels/flash_head_dims.h; ctest House.FlashKernelFilesAreGenerated keeps both current), so the files
# say which variants exist. LMSCALE_FA_HEADDIMS / LMSCALE_FA_DTYPES choose which are built ("all", or a
# list such as 64 / bf16 for quick iteration), and flash_variants.h, generated below, is the built list
# that dispatch (flash_api.cu), the ops' checks and the tests read (docs/design.md §5.2).
set(LMSCALE_FA_HEADDIMS "all" CACHE STRING "FlashAttention head dims to build: all, or a list such as 64;128")
set(LMSCALE_FA_DTYPES "all" CACHE STRING "FlashAttention dtypes to build: all, or a list such as bf16")
set(_fa_files "")
set(_fa_headdims_generated "")
set(_fa_dtypes_generated "")
foreach(_src ${LMSCALE_KERNEL_SOURCES})
  get_filename_component(_name ${_src} NAME_WE)
  if(_name MATCHES "^flash_(fwd|bwd)_hdim([0-9]+)_([a-z0-9]+)$")
    list(APPEND _fa_files ${_name})
    list(APPEND _fa_headdims_generated ${CMAKE_MATCH_2})
    list(APPEND _fa_dtypes_generated ${CMAKE_MATCH_3})
  endif()
endforeach()
list(REMOVE_DUPLICATES _fa_headdims_generated)
list(SORT _fa_headdims_generated COMPARE NATURAL)
list(REMOVE_DUPLICATES _fa_dtypes_generated)
list(SORT _fa_dtypes_generated)
function(lmscale_fa_pick out requested generated what)
  if(requested STREQUAL "all")
    set(requested ${generated})
  endif()
  if(NOT requested)
    message(FATAL_ERROR "LMSCALE_FA_${what} is empty: give \"all\" or some of: ${generated}")
  endif()
  foreach(_item ${requested})
    if(NOT _item IN_LIST generated)
      message(FATAL_ERROR "LMSCALE_FA_${what} names ${_item}, which has no generated kernel file; generated: "
                          "${generated}. Add it to src/kernels/generate_flash_kernels.py and run it, or pick from that list.")
    endif()
  endforeach()
  set(${out} ${requested} PARENT_SCOPE)
endfunction()
lmscale_fa_pick(LMSCALE_FA_HEADDIMS_BUILT "${LMSCALE_FA_HEADDIMS}" "${_fa_headdims_generated}" HEADDIMS)
lmscale_fa_pick(LMSCALE_FA_DTYPES_BUILT "${LMSCALE_FA_DTYPES}" "${_fa_dtypes_generated}" DTYPES)
list(SORT LMSCALE_FA_HEADDIMS_BUILT COMPARE NATURAL)
# The lists for flash_variants.h; every chosen (head dim, dtype) needs both directions' files.
string(REPLACE ";" ", " LMSCALE_FA_HEAD_DIM_LIST "${LMSCALE_FA_HEADDIMS_BUILT}")
set(LMSCALE_FA_DTYPE_ITEMS "")
foreach(_dtype ${LMSCALE_FA_DTYPES_BUILT})
  string(TOUPPER ${_dtype} _dtype_upper)
  string(APPEND LMSCALE_FA_DTYPE_ITEMS " X(${_dtype}, ${_dtype_upper})")
  foreach(_hdim ${LMSCALE_FA_HEADDIMS_BUILT})
    foreach(_dir fwd bwd)
      if(NOT flash_${_dir}_hdim${_hdim}_${_dtype} IN_LIST _fa_files)
        message(FATAL_ERROR "src/kernels/flash_${_dir}_hdim${_hdim}_${_dtype}.cu is missing: run "
                            "src/kernels/generate_flash_kernels.py, or leave head dim ${_hdim} / ${_dtype} out "
                            "of LMSCALE_FA_HEADDIMS / LMSCALE_FA_DTYPES")
      endif()
    endforeach()
  endforeach()
endforeach()
# Drop the instantiation files that were not chosen.
foreach(_src ${LMSCALE_KERNEL_SOURCES})
  get_filename_component(_name ${_src} NAME_WE)
  if(_name MATCHES "^flash_(fwd|bwd)_hdim([0-9]+)_([a-z0-9]+)$")
    if(NOT CMAKE_MATCH_2 IN_LIST LMSCALE_FA_HEADDIMS_BUILT OR NOT CMAKE_MATCH_3 IN_LIST LMSCALE_FA_DTYPES_BUILT)
      list(REMOVE_ITEM LMSCALE_KERNEL_SOURCES ${_src})
    endif()
  endif()
endforeach()
# The header lands in <build>/generated/kernels/ and is included as "kernels/flash_variants.h". Only
# the files that read the list get that folder on their include path (the kernel sources and the
# flash tests): a flag on every target would change every compile command, and so miss the compiler
# cache for the whole tree.
set(LMSCALE_GENERATED_INCLUDE ${CMAKE_BINARY_DIR}/generated)
configure_file(${CMAKE_SOURCE_DIR}/src/kernels/flash_variants.h.in
               ${LMSCALE_GENERATED_INCLUDE}/kernels/flash_variants.h @ONLY)
file(GLOB _fa_list_readers ${CMAKE_SOURCE_DIR}/src/kernels/*.cu ${CMAKE_SOURCE_DIR}/tests/cpp/kernels/flash_*_test.cpp)
set_source_files_properties(${_fa_list_readers} PROPERTIES INCLUDE_DIRECTORIES ${LMSCALE_GENERATED_INCLUDE})
message(STATUS "lmscale: FlashAttention variants: head dims ${LMSCALE_FA_HEADDIMS_BUILT} x ${LMSCALE_FA_DTYPES_BUILT}")
