// CHECK: broken invariants only (never user input). Prints the message and aborts.
#pragma once
#include <cstdio>
#include <cstdlib>

#define TS_CHECK(cond, msg)                                                           \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "CHECK failed at %s:%d: %s: %s\n", __FILE__, __LINE__, #cond, \
                   (msg));                                                            \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)
