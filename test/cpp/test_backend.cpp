#include <gtest/gtest.h>
TEST(BackendPlaceholder, Empty) {}
