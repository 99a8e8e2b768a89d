# Installing and packaging: `cmake --install build --prefix P` puts ddprun, ddprun-store and (when built) the
# worker as ddprun-worker under P/bin, with the README, the licence, the docs, the example configs and the carried
# MNIST sample under P/share, and ddprun's orphan guard under P/libexec/ddprun; `cpack` (in build/) makes a Debian package of the same files.
include(GNUInstallDirs)

install(TARGETS ddprun ddprun-store RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# ddprun looks for its orphan guard here (launcher/process/orphan_guard.hpp).
install(TARGETS ddprun-orphan-guard RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/ddprun)
if(TARGET worker)
  # "worker" is too general a name for /usr/bin.
  install(PROGRAMS $<TARGET_FILE:worker> DESTINATION ${CMAKE_INSTALL_BINDIR} RENAME ddprun-worker)
endif()
install(FILES README.md LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} FILES_MATCHING PATTERN "*.md")
install(DIRECTORY configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/ddprun/configs)
install(DIRECTORY data/mnist/ DESTINATION ${CMAKE_INSTALL_DATADIR}/ddprun/data/mnist)

set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "ddprun")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "ddprun maintainers <maintainers@ddprun.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "torchrun-compatible launcher, TCPStore server and LibTorch DDP worker")
# One string: two would be a CMake list, joined with a ';' in the package's description.
set(CPACK_PACKAGE_DESCRIPTION
    "ddprun starts, watches and restarts PyTorch-style distributed data-parallel worker groups with torchrun's\n\
flags and environment; ddprun-store is a standalone TCPStore server; ddprun-worker trains MNIST with DDP.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "science")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/ddprun/ddprun")
# The shared libraries' packages (spdlog, fmt, Boost.Filesystem, LibTorch, …) come from dpkg-shlibdeps.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Python workers are run with the user's interpreter; Debian's torch is the one ddprun is tested with.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-torch, elfutils")
set(CPACK_PACKAGE_INSTALL_DIRECTORY "ddprun")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
include(CPack)
