# The qbruntime SDK (KVLANE_QBRUNTIME=sdk) or its stand-in (fake), as qbruntime::qbruntime,
# and the forms of the calls that QBRUNTIME.md lists as unknown, detected by compiling them:
#   KVLANE_QBR_BATCH_FORM  infer with one BatchParam per row (0 = none found)
#   KVLANE_QBR_SLOT_FORM   dump/load of one cache_id of a Batch model (0 = none found)
#   KVLANE_QBR_HAS_STATUS_STRING  statusCodeToString (qbruntime >= 1.4)
#   KVLANE_QBR_HAS_AUTO_CORE      ModelConfig::setAutoCoreMode (qbruntime >= 1.1)
# Each found form becomes a compile definition in KVLANE_QBR_DEFINITIONS for qbr_shim.cpp,
# the only file that includes the SDK header.
include_guard(GLOBAL)
include(CheckCXXSourceCompiles)
include(CMakePushCheckState)

if(KVLANE_QBRUNTIME STREQUAL "sdk")
  set(QBRUNTIME_ROOT "" CACHE PATH "qbruntime install prefix (when not in a system path)")
  find_package(qbruntime CONFIG QUIET HINTS ${QBRUNTIME_ROOT}) # SDK >= 1.3.1
  if(NOT TARGET qbruntime::qbruntime)
    find_path(QBRUNTIME_INCLUDE_DIR qbruntime/qbruntime.h HINTS ${QBRUNTIME_ROOT}/include)
    find_library(QBRUNTIME_LIBRARY qbruntime HINTS ${QBRUNTIME_ROOT}/lib)
    if(NOT QBRUNTIME_INCLUDE_DIR OR NOT QBRUNTIME_LIBRARY)
      message(FATAL_ERROR "KVLANE_QBRUNTIME=sdk: qbruntime not found (header qbruntime/qbruntime.h: "
        "${QBRUNTIME_INCLUDE_DIR}, library: ${QBRUNTIME_LIBRARY}). Install Mobilint's "
        "mobilint-qb-runtime package or pass -DQBRUNTIME_ROOT=<prefix>.")
    endif()
    add_library(qbruntime::qbruntime UNKNOWN IMPORTED)
    set_target_properties(qbruntime::qbruntime PROPERTIES IMPORTED_LOCATION ${QBRUNTIME_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${QBRUNTIME_INCLUDE_DIR})
  endif()
  get_target_property(qbr_includes qbruntime::qbruntime INTERFACE_INCLUDE_DIRECTORIES)
  set(qbr_check_libraries qbruntime::qbruntime)
  set(qbr_check_definitions "")
elseif(KVLANE_QBRUNTIME STREQUAL "fake")
  # 120: the 1.2 surface with BatchParam and per-slot transfers in one guessed form;
  # 100: the verified 1.0.0 surface only (tests/CMakeLists.txt builds that one too).
  set(FAKE_QBR_API 120)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/fake_qbruntime ${PROJECT_BINARY_DIR}/fake_qbruntime)
  set(qbr_includes ${PROJECT_SOURCE_DIR}/tests/fake_qbruntime/include)
  set(qbr_check_libraries "")
  set(qbr_check_definitions -DFAKE_QBR_API=${FAKE_QBR_API})
endif()

# kvlane_qbr_detect_forms(<prefix> [QUIET] [DEFINITIONS <-D...>]): sets <prefix>_DEFINITIONS in
# the caller; QUIET reports missing forms as a status line instead of a warning. Only
# compilation is checked (the stand-in's library needs the simulator to link).
function(kvlane_qbr_detect_forms prefix)
  cmake_parse_arguments(arg "QUIET" "" "DEFINITIONS" ${ARGN})
  set(level WARNING)
  if(arg_QUIET)
    set(level STATUS)
  endif()
  cmake_push_check_state(RESET)
  set(CMAKE_REQUIRED_QUIET ON)
  set(CMAKE_REQUIRED_INCLUDES ${qbr_includes})
  set(CMAKE_REQUIRED_DEFINITIONS ${arg_DEFINITIONS})
  set(CMAKE_REQUIRED_FLAGS -std=c++17)
  set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
  set(head "#include <qbruntime/qbruntime.h>\n#include <vector>\nusing namespace mobilint;\n")
  # A form is one string of a CMake list, so its semicolons are written @SEMI@.
  set(batch_forms
    "StatusCode f(Model& m, const std::vector<NDArray<float>>& in, std::vector<NDArray<float>>& out, const std::vector<BatchParam>& p) { return m.infer(in, out, p)@SEMI@ }"
    "StatusCode f(Model& m, const std::vector<NDArray<float>>& in, std::vector<NDArray<float>>& out, const std::vector<BatchParam>& p) { return m.infer(in, out, 0, p)@SEMI@ }"
    "StatusCode f(Model& m, const std::vector<NDArray<float>>& in, std::vector<NDArray<float>>& out, const std::vector<BatchParam>& p) { StatusCode sc@SEMI@ out = m.infer(in, p, sc)@SEMI@ return sc@SEMI@ }")
  set(slot_forms
    "StatusCode d(Model& m, std::vector<std::vector<int8_t>>& b, int id) { return m.dumpCacheMemory(b, id)@SEMI@ } StatusCode l(Model& m, const std::vector<std::vector<int8_t>>& b, int id) { return m.loadCacheMemory(b, id)@SEMI@ }"
    "StatusCode d(Model& m, std::vector<std::vector<int8_t>>& b, int id) { return m.dumpCacheMemory(id, b)@SEMI@ } StatusCode l(Model& m, const std::vector<std::vector<int8_t>>& b, int id) { return m.loadCacheMemory(id, b)@SEMI@ }")
  set(n 0)
  set(batch 0)
  foreach(form IN LISTS batch_forms)
    math(EXPR n "${n} + 1")
    unset(ok CACHE)
    unset(ok)
    string(REPLACE "@SEMI@" ";" code "${form}")
    check_cxx_source_compiles("${head}${code}\nint main() { return 0; }" ok)
    if(ok)
      set(batch ${n})
      break()
    endif()
  endforeach()
  set(n 0)
  set(slot 0)
  foreach(form IN LISTS slot_forms)
    math(EXPR n "${n} + 1")
    unset(ok CACHE)
    unset(ok)
    string(REPLACE "@SEMI@" ";" code "${form}")
    check_cxx_source_compiles("${head}${code}\nint main() { return 0; }" ok)
    if(ok)
      set(slot ${n})
      break()
    endif()
  endforeach()
  unset(ok CACHE)
  unset(ok)
  check_cxx_source_compiles("${head}#include <string>\nstd::string f(StatusCode c) { return statusCodeToString(c); }\nint main() { return 0; }" ok)
  set(strings 0)
  if(ok)
    set(strings 1)
  endif()
  unset(ok CACHE)
  unset(ok)
  check_cxx_source_compiles("${head}void f(ModelConfig& mc) { mc.setAutoCoreMode(); }\nint main() { return 0; }" ok)
  set(auto_core 0)
  if(ok)
    set(auto_core 1)
  endif()
  unset(ok CACHE)
  cmake_pop_check_state()
  if(batch EQUAL 0)
    message(${level} "qbruntime (${prefix}): no infer overload taking BatchParam was found (tried "
      "infer(in, out, params), infer(in, out, cache_size, params), infer(in, params, sc)); "
      "Batch .mxq models will be refused. Non-batch models work.")
  endif()
  if(slot EQUAL 0)
    message(${level} "qbruntime (${prefix}): no per-slot dumpCacheMemory/loadCacheMemory was found "
      "(tried (bufs, id) and (id, bufs)); on Batch models the backend reports snapshots "
      "unavailable and the scheduler preempts by recompute.")
  endif()
  message(STATUS "qbruntime (${prefix}): batch infer form ${batch}, per-slot transfer form ${slot}, "
    "statusCodeToString ${strings}, setAutoCoreMode ${auto_core}")
  set(${prefix}_DEFINITIONS KVLANE_QBR_BATCH_FORM=${batch} KVLANE_QBR_SLOT_FORM=${slot}
    KVLANE_QBR_HAS_STATUS_STRING=${strings} KVLANE_QBR_HAS_AUTO_CORE=${auto_core} PARENT_SCOPE)
endfunction()

kvlane_qbr_detect_forms(KVLANE_QBR DEFINITIONS ${qbr_check_definitions})
