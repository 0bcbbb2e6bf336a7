# The header-only dependencies (CLI11, nlohmann-json, Gloo's headers, GoogleTest's sources), pinned:
# four Debian bookworm packages fetched over HTTP with their SHA-256 checked and unpacked by CMake
# itself (a .deb is an ar archive around a tar, which file(ARCHIVE_EXTRACT) reads), so no apt, dpkg
# or Debian is needed: any Linux with CMake 3.22 and the network builds the same headers.
#
# Why Debian's packages and not upstream release tarballs: the machines this project is built on
# (CI included) reach Debian's archive and PyPI only, and PyPI carries none of these four. The
# packages hold nothing but headers and sources (Gloo's "amd64" one too: its config.h names no
# architecture), so one set serves every architecture.
#
#   include(cmake/fetch_deps.cmake) + lmscale_fetch_deps(<dir>)     from CMakeLists.txt, when <dir> is not complete
#   cmake -DLMSCALE_DEPS=<dir> -P cmake/fetch_deps.cmake             script mode (scripts/bundle_deps.sh)
#
# Where from: $LMSCALE_DEBIAN_MIRROR (default https://deb.debian.org/debian), then the permanent
# snapshot of the archive (a pool file stays on the mirrors only while its release carries it).
# Changing a pin: `apt-get download --print-uris <package>` on a Debian machine prints the pool path
# and the SHA-256.

set(LMSCALE_DEPS_PINS
  # pool path                                                                    SHA-256
  "pool/main/c/cli11/libcli11-dev_2.1.2%2Bds-1_all.deb|f1f6ee9ec053e0e0bcec47345e241b6a8ee006321248b4329e9ce88d2b4b64a8"
  "pool/main/n/nlohmann-json3/nlohmann-json3-dev_3.11.2-2_all.deb|ec57940def6b6186c30be0e0ee81d1e58f86d11a54a145b28686a1e3e4aae801"
  "pool/main/g/gloo/libgloo-dev_0.0%7Egit20220518.5b14351-3_amd64.deb|80529c9fd8af452faf489e686b94bf87075965c40673803810c4f41634b1e299"
  "pool/main/g/googletest/googletest_1.12.1-0.2_all.deb|927be72067517da503b6538026d451455c9e860f5dbfe237f792543db7d5a928")
set(LMSCALE_DEPS_SNAPSHOT "https://snapshot.debian.org/archive/debian/20250520T000000Z")

# Fills <dest> (usr/include, usr/src/googletest) unless <dest>/.complete names these very pins.
function(lmscale_fetch_deps dest)
  string(SHA256 _stamp "${LMSCALE_DEPS_PINS}")
  if(EXISTS "${dest}/.complete")
    file(READ "${dest}/.complete" _have)
    string(STRIP "${_have}" _have)
    # An empty .complete is one scripts/bundle_deps.sh wrote with apt-get before the pins: same packages.
    if(_have STREQUAL _stamp OR _have STREQUAL "")
      return()
    endif()
  endif()
  set(_mirror "https://deb.debian.org/debian")
  if(DEFINED ENV{LMSCALE_DEBIAN_MIRROR} AND NOT "$ENV{LMSCALE_DEBIAN_MIRROR}" STREQUAL "")
    set(_mirror "$ENV{LMSCALE_DEBIAN_MIRROR}")
  endif()
  message(STATUS "lmscale: fetching the pinned header packages (CLI11, nlohmann-json, Gloo, GoogleTest; under 1 MB) into ${dest}")
  file(MAKE_DIRECTORY "${dest}/debs")
  foreach(_pin ${LMSCALE_DEPS_PINS})
    string(REPLACE "|" ";" _pin "${_pin}")
    list(GET _pin 0 _path)
    list(GET _pin 1 _sha)
    get_filename_component(_name "${_path}" NAME)
    set(_deb "${dest}/debs/${_name}")
    set(_tried "")
    foreach(_base "${_mirror}" "${LMSCALE_DEPS_SNAPSHOT}")
      if(EXISTS "${_deb}")
        file(SHA256 "${_deb}" _got)
        if(_got STREQUAL _sha)
          break()
        endif()
        file(REMOVE "${_deb}")
      endif()
      file(DOWNLOAD "${_base}/${_path}" "${_deb}" STATUS _status TIMEOUT 120 INACTIVITY_TIMEOUT 30)
      list(GET _status 0 _code)
      list(GET _status 1 _why)
      if(_code EQUAL 0)
        file(SHA256 "${_deb}" _got)
        if(NOT _got STREQUAL _sha)
          set(_why "SHA-256 ${_got}, pinned ${_sha}")
          file(REMOVE "${_deb}")
        endif()
      else()
        file(REMOVE "${_deb}")
      endif()
      list(APPEND _tried "${_base}/${_path}: ${_why}")
    endforeach()
    if(NOT EXISTS "${_deb}")
      string(REPLACE ";" "\n  " _tried "${_tried}")
      message(FATAL_ERROR "lmscale: could not fetch ${_name}:\n  ${_tried}\nFix: allow HTTPS to a Debian mirror "
                          "(LMSCALE_DEBIAN_MIRROR=<mirror>/debian picks one), or copy a complete .deps/ folder "
                          "made elsewhere (scripts/bundle_deps.sh) and pass it with -DLMSCALE_DEPS=<folder>.")
    endif()
    # .deb = ar(debian-binary, control.tar.*, data.tar.*); the files are in data.tar.*.
    set(_ar "${dest}/debs/${_name}.d")
    file(REMOVE_RECURSE "${_ar}")
    file(ARCHIVE_EXTRACT INPUT "${_deb}" DESTINATION "${_ar}")
    file(GLOB _data "${_ar}/data.tar.*")
    if(NOT _data)
      message(FATAL_ERROR "lmscale: ${_deb} holds no data.tar.* (not a Debian package?); delete it and configure again")
    endif()
    file(ARCHIVE_EXTRACT INPUT "${_data}" DESTINATION "${dest}")
    file(REMOVE_RECURSE "${_ar}")
  endforeach()
  foreach(_need usr/include/CLI/CLI.hpp usr/include/nlohmann/json.hpp usr/include/gloo/config.h
                usr/src/googletest/CMakeLists.txt)
    if(NOT EXISTS "${dest}/${_need}")
      message(FATAL_ERROR "lmscale: the pinned packages unpacked into ${dest} lack ${_need}; the pins in "
                          "cmake/fetch_deps.cmake no longer match what the build includes")
    endif()
  endforeach()
  file(WRITE "${dest}/.complete" "${_stamp}\n")
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT LMSCALE_DEPS)
    message(FATAL_ERROR "usage: cmake -DLMSCALE_DEPS=<folder> -P cmake/fetch_deps.cmake")
  endif()
  get_filename_component(_dest "${LMSCALE_DEPS}" ABSOLUTE)
  lmscale_fetch_deps("${_dest}")
  message(STATUS "lmscale: headers in ${_dest}/usr/include, GoogleTest in ${_dest}/usr/src/googletest")
endif()
