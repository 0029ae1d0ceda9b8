// Catch2's implementation, which its single header carries, and the main of every test program,
// compiled once. Before Catch2 runs, it asks the program's attn_test::before_catch (a test program
// links tests/no_setup.cpp or defines its own, as tests/step_tests_main.cpp does).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tests/catch_main.h"

int main(int argc, char** argv) {
  if (const int code = attn_test::before_catch(argc, argv); code >= 0) return code;
  return Catch::Session().run(argc, argv);
}
