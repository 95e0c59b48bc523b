# spdlog and fmt are used header-only (SPDLOG_FMT_EXTERNAL + FMT_HEADER_ONLY), so
# liblazyfuse.so has no runtime dependency on libspdlog or libfmt. Only backend/logging.cpp sees
# these headers. See Note [Logging]. Set LAZYFUSE_SPDLOG_INCLUDE_DIR to a folder holding both
# spdlog/ and fmt/ (fmt 9) where they are not installed system-wide.
find_path(LAZYFUSE_SPDLOG_INCLUDE_DIR spdlog/spdlog.h)
find_path(LAZYFUSE_FMT_INCLUDE_DIR fmt/format.h HINTS ${LAZYFUSE_SPDLOG_INCLUDE_DIR})
if(NOT LAZYFUSE_SPDLOG_INCLUDE_DIR OR NOT LAZYFUSE_FMT_INCLUDE_DIR)
  message(FATAL_ERROR "spdlog and fmt headers not found: apt-get install libspdlog-dev libfmt-dev")
endif()
find_package(Threads REQUIRED)
add_library(lazyfuse_logging STATIC backend/logging.cpp)
target_include_directories(lazyfuse_logging SYSTEM PRIVATE
  ${LAZYFUSE_SPDLOG_INCLUDE_DIR} ${LAZYFUSE_FMT_INCLUDE_DIR})
target_include_directories(lazyfuse_logging PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}>)
target_compile_definitions(lazyfuse_logging PRIVATE SPDLOG_FMT_EXTERNAL FMT_HEADER_ONLY)
# logging.cpp reads its level from lazy_ir/config.cpp; LINK_ONLY keeps torch's include folders
# (and their fmt) away from it (Note [Logging]).
target_link_libraries(lazyfuse_logging PUBLIC Threads::Threads $<LINK_ONLY:lazyfuse_ir>)
