#ifndef BLEOTA_CLIBFUZZER_H
#define BLEOTA_CLIBFUZZER_H

#include <stddef.h>
#include <stdint.h>

/// libFuzzer's driver (compiler-rt's FuzzerInterface.h): parses the command
/// line like libFuzzer's own main and fuzzes `callback`. Linked from
/// libclang_rt.fuzzer when building with -sanitize=fuzzer.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
