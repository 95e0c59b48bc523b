# `cmake --install` lays out lib/liblazyfuse.so, include/lazyfuse/ and a CMake package so that a
# LibTorch program can `find_package(lazyfuse)` and link `lazyfuse::lazyfuse`.
include(CMakePackageConfigHelpers)
include(GNUInstallDirs)

install(TARGETS lazyfuse LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET lazyfuse_cuda_graphs)  # beside liblazyfuse.so, where it looks for it
  install(TARGETS lazyfuse_cuda_graphs LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
if(TARGET lazyfuse_python)
  install(TARGETS lazyfuse_python LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(DIRECTORY include/lazyfuse DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(LAZYFUSE_TORCH_ROOT "${TORCH_ROOT}")
configure_package_config_file(cmake/lazyfuseConfig.cmake.in
  ${CMAKE_BINARY_DIR}/lazyfuseConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lazyfuse)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/lazyfuseConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/lazyfuseConfig.cmake ${CMAKE_BINARY_DIR}/lazyfuseConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lazyfuse)
