#include <gtest/gtest.h>
TEST(GraphPlaceholder, Empty) {}
