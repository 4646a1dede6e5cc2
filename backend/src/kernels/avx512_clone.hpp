// DSL_AVX512_CLONE: before a function whose loops the compiler vectorizes, a clone of it for AVX-512 where GCC
// builds for x86-64, chosen when the program loads (the baseline lacks 64-bit multiplies and 16-float
// vectors); the same operations in the same order, so the same values.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DSL_AVX512_CLONE [[gnu::target_clones("arch=x86-64-v4", "default")]]
#else
#define DSL_AVX512_CLONE
#endif
