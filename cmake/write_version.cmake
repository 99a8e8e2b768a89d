# Writes common/version.hpp from its template at build time, with the commit of the source tree then
# (empty outside a git checkout). configure_file leaves the file untouched when nothing changed, so an
# unchanged commit rebuilds nothing. Called with -DSOURCE_DIR= -DTEMPLATE= -DOUTPUT= -DPROJECT_VERSION=
set(DDPRUN_GIT_COMMIT "")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE DDPRUN_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
configure_file(${TEMPLATE} ${OUTPUT} @ONLY)
