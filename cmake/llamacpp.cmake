# The llamacpp backend's dependency: llama.cpp (libllama and ggml), as kvlane::llama.
#   KVLANE_LLAMACPP = auto (default) | on | off
#     auto: use llama.cpp when found, else build without the backend (a status line says so);
#     on:   fail the configure when it is not found.
# Where it is looked for, in order:
#   1. an installed llama.cpp with its CMake package (find_package(llama)), e.g. under /usr/local;
#   2. the build cache of scripts/llama-cpp (KVLANE_LLAMACPP_PREFIX, by default
#      $KVLANE_CACHE or ~/.cache/kvlane, then llama.cpp-v0.4.0-3.21.1): its src/ and build/ trees.
# Targets: kvlane::llama (libllama and ggml), kvlane::llama_common (llama.cpp's common library).
# Sets KVLANE_HAVE_LLAMACPP, KVLANE_LLAMACPP_SOURCE (the source tree when known, for the
# vocabularies and templates the tests use) and KVLANE_LLAMACPP_SERVER (llama-server, when built).
include_guard(GLOBAL)

set(KVLANE_LLAMACPP "auto" CACHE STRING "llamacpp backend: auto | on | off")
set_property(CACHE KVLANE_LLAMACPP PROPERTY STRINGS auto on off)
if(NOT KVLANE_LLAMACPP MATCHES "^(auto|on|off)$")
  message(FATAL_ERROR "KVLANE_LLAMACPP must be auto, on or off (got '${KVLANE_LLAMACPP}')")
endif()

set(_llama_cache_root "$ENV{KVLANE_CACHE}")
if(NOT _llama_cache_root)
  if(DEFINED ENV{XDG_CACHE_HOME} AND NOT "$ENV{XDG_CACHE_HOME}" STREQUAL "")
    set(_llama_cache_root "$ENV{XDG_CACHE_HOME}/kvlane")
  else()
    set(_llama_cache_root "$ENV{HOME}/.cache/kvlane")
  endif()
endif()
set(KVLANE_LLAMACPP_PREFIX "${_llama_cache_root}/llama.cpp-v0.4.0-3.21.1" CACHE PATH
  "scripts/llama-cpp's build cache (holds src/ and build/)")

set(KVLANE_HAVE_LLAMACPP OFF)
set(KVLANE_LLAMACPP_SOURCE "")
set(KVLANE_LLAMACPP_SERVER "")
set(KVLANE_LLAMACPP_VERSION_TEXT "llama.cpp")

if(NOT KVLANE_LLAMACPP STREQUAL "off")
  find_package(llama CONFIG QUIET)
  if(TARGET llama)
    add_library(kvlane::llama INTERFACE IMPORTED)
    target_link_libraries(kvlane::llama INTERFACE llama)
    if(NOT TARGET llama-common)
      message(FATAL_ERROR "llamacpp: the installed llama.cpp has no llama-common library (its "
        "Jinja engine renders chat templates); use scripts/llama-cpp's build instead")
    endif()
    add_library(kvlane::llama_common INTERFACE IMPORTED)
    target_link_libraries(kvlane::llama_common INTERFACE llama-common)
    set(KVLANE_HAVE_LLAMACPP ON)
    set(KVLANE_LLAMACPP_VERSION_TEXT "llama.cpp ${llama_VERSION} (installed)")
    find_program(KVLANE_LLAMACPP_SERVER_PROGRAM llama-server)
    if(KVLANE_LLAMACPP_SERVER_PROGRAM)
      set(KVLANE_LLAMACPP_SERVER ${KVLANE_LLAMACPP_SERVER_PROGRAM})
    endif()
    message(STATUS "llamacpp backend: the installed llama.cpp ${llama_VERSION}")
  elseif(EXISTS "${KVLANE_LLAMACPP_PREFIX}/.built")
    set(_src "${KVLANE_LLAMACPP_PREFIX}/src")
    set(_bld "${KVLANE_LLAMACPP_PREFIX}/build")
    find_package(OpenMP REQUIRED COMPONENTS CXX)
    set(_libs "")
    foreach(lib src/libllama.a ggml/src/libggml.a ggml/src/libggml-cpu.a ggml/src/libggml-base.a)
      if(NOT EXISTS "${_bld}/${lib}")
        message(FATAL_ERROR "llamacpp: ${_bld}/${lib} is missing: remove ${KVLANE_LLAMACPP_PREFIX} "
          "and run scripts/llama-cpp again")
      endif()
      list(APPEND _libs "${_bld}/${lib}")
    endforeach()
    add_library(kvlane::llama INTERFACE IMPORTED)
    # The archives depend on each other in this order; ggml-cpu runs on OpenMP threads.
    target_link_libraries(kvlane::llama INTERFACE ${_libs} OpenMP::OpenMP_CXX Threads::Threads
      ${CMAKE_DL_LIBS} m)
    # A SYSTEM include: llama.h's own warnings are not kvlane's -Werror business.
    set_target_properties(kvlane::llama PROPERTIES
      INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${_src}/include;${_src}/ggml/include"
      INTERFACE_INCLUDE_DIRECTORIES "${_src}/include;${_src}/ggml/include")
    # llama.cpp's common library: its Jinja engine renders chat templates (backends/jinja/).
    set(_common_libs "")
    foreach(lib common/libllama-common.a common/libllama-common-base.a
        vendor/cpp-httplib/libcpp-httplib.a)
      if(NOT EXISTS "${_bld}/${lib}")
        message(FATAL_ERROR "llamacpp: ${_bld}/${lib} is missing: remove ${KVLANE_LLAMACPP_PREFIX} "
          "and run scripts/llama-cpp again")
      endif()
      list(APPEND _common_libs "${_bld}/${lib}")
    endforeach()
    add_library(kvlane::llama_common INTERFACE IMPORTED)
    target_link_libraries(kvlane::llama_common INTERFACE ${_common_libs} kvlane::llama)
    set_target_properties(kvlane::llama_common PROPERTIES
      INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${_src}/common"
      INTERFACE_INCLUDE_DIRECTORIES "${_src}/common")
    set(KVLANE_HAVE_LLAMACPP ON)
    set(KVLANE_LLAMACPP_SOURCE "${_src}")
    if(EXISTS "${_bld}/bin/llama-server")
      set(KVLANE_LLAMACPP_SERVER "${_bld}/bin/llama-server")
    endif()
    set(KVLANE_LLAMACPP_VERSION_TEXT "llama.cpp v0.4.0 (node-llama-cpp 3.21.1 bundle)")
    message(STATUS "llamacpp backend: llama.cpp from ${KVLANE_LLAMACPP_PREFIX}")
  elseif(KVLANE_LLAMACPP STREQUAL "on")
    message(FATAL_ERROR "KVLANE_LLAMACPP=on but llama.cpp was not found: run scripts/llama-cpp "
      "(builds it into ${KVLANE_LLAMACPP_PREFIX}) or install llama.cpp with its CMake package")
  else()
    message(STATUS "llamacpp backend: off (llama.cpp not found; run scripts/llama-cpp)")
  endif()
endif()
