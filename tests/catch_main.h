// The hook tests/main.cpp calls before Catch2 runs.
#pragma once

namespace attn_test {

// An exit code to end the program with before any test runs (77: CTest's "skipped"), or -1 to run
// the tests. Each test program links exactly one definition.
int before_catch(int argc, char** argv);

}  // namespace attn_test
