// attn_test::before_catch for the test programs that need nothing before Catch2 runs.
#include "tests/catch_main.h"

int attn_test::before_catch(int, char**) {
  return -1;
}
