/* Shared pieces of the fuzz harnesses (fuzz/fuzz_*.c).
 *
 * Each harness defines LLVMFuzzerTestOneInput and feeds the bytes to one of
 * weft's readers of untrusted input, the way the CLI does: most readers take a
 * path, so the bytes are first written to a private temporary file. A harness
 * accepts any status the reader returns; what it must never see is a crash, a
 * hang, a sanitizer report or an unbounded allocation.
 *
 * Built two ways (CMakeLists.txt): with clang's libFuzzer when WEFT_FUZZ=ON
 * (`make fuzz`), and always as fuzz_replay_<name>, which runs the harness over
 * the committed corpus and crash reproducers (fuzz/replay.c) in the suite. */
#ifndef WEFT_FUZZ_H
#define WEFT_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes bytes to a per-process temporary file whose name ends in `suffix`
 * (".json", ".onnx", ...) and returns its path (static storage, overwritten
 * by the next call with the same slot 0..3). NULL on failure. */
const char *fuzz_write_temp(int slot, const char *suffix, const uint8_t *data, size_t size);

/* The bytes as a NUL-terminated string (heap, caller frees); NUL bytes inside
 * are kept, so the string may end early. */
char *fuzz_strndup(const uint8_t *data, size_t size);

/* Byte 0 picks how the rest reaches a reader that takes a spec or a path:
 * even, as a string (*owned holds it; the caller frees it); odd, as a file
 * whose name ends in suffix. NULL when size is 0 or the file cannot be made. */
const char *fuzz_spec_or_path(const uint8_t *data, size_t size, const char *suffix, char **owned);

#endif
