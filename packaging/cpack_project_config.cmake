# Read by cpack at packaging time (CPACK_PROJECT_CONFIG_FILE).
if(CPACK_GENERATOR STREQUAL "DEB" AND NOT CPACK_PACKAGING_INSTALL_PREFIX STREQUAL "/usr")
  message(WARNING "This tree is configured with CMAKE_INSTALL_PREFIX=${CPACK_PACKAGING_INSTALL_PREFIX}: "
    "the .deb will install there. `make deb` configures /usr.")
endif()
