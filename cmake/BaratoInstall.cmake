include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS barato EXPORT baratoTargets)
install(DIRECTORY include/barato DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT baratoTargets NAMESPACE barato:: DESTINATION ${CMAKE_INSTALL_DATADIR}/cmake/barato)
configure_package_config_file(cmake/baratoConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/baratoConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_DATADIR}/cmake/barato)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/baratoConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion ARCH_INDEPENDENT)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/baratoConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/baratoConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_DATADIR}/cmake/barato)
