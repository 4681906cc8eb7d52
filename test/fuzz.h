/*
 * fuzz.h - mutation fuzzing of a file reader, as the data readers' tests do
 * it: a valid file is cut, has bits flipped, a byte replaced or a
 * troublesome token inserted, plain or (every third try) in its gzipped
 * form, and each result goes through the reader under test, which must
 * load it or refuse it cleanly; the sanitizer builds catch the rest.
 *
 * Must never write outside the test's private folder (tmpdir.h).
 */
#ifndef DML_TEST_FUZZ_H
#define DML_TEST_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/**
 * Run tries mutations of src (len bytes, at most 65536) through load(path),
 * which returns 0 when the file loaded and non-zero when it was refused
 * (after asserting how), counting both in *ok and *bad. tokens[0..ntokens-1]
 * are the insertions ("" inserts a NUL byte); seed picks the mutations.
 */
void dml_test_fuzz_file(const char *src, size_t len, const char *const *tokens,
			size_t ntokens, int tries, uint64_t seed, int (*load)(const char *path),
			int *ok, int *bad);

#endif
