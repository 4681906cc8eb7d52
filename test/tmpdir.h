/*
 * tmpdir.h - the private temporary folder of a unit-test suite.
 *
 * A suite gives a test case the folder as a Check fixture: it is made under
 * $TMPDIR (or P_tmpdir) before the tests and removed, with the files the
 * tests wrote into it, after them. Tests write plain files there, or a
 * store's folder (which may hold one folder of its own), nothing deeper.
 *
 * Must never remove anything outside the folder it made.
 */
#ifndef DML_TEST_TMPDIR_H
#define DML_TEST_TMPDIR_H

#include <check.h>
#include <stddef.h>

/** Room for the folder's path and a file name in it. */
#define DML_TEST_PATH_MAX 4400

/**
 * Give tc a fresh folder PREFIX.XXXXXX: around each of its tests, in the
 * test's own process, when per_test is non-zero, else once around all of
 * them. A program uses one prefix; a failed mkdtemp ends it with status 1.
 */
void dml_test_tmpdir_fixture(TCase *tc, const char *prefix, int per_test);

/** The folder of the running test case; "" outside its fixture. */
const char *dml_test_tmpdir(void);

/** path = "FOLDER/NAME" (cut to len bytes). Returns path. */
const char *dml_test_tmpdir_path(char *path, size_t len, const char *name);

/**
 * Write len bytes to NAME in the folder, gzipped when gz is non-zero, and
 * give its path (valid until the next call); a failed write fails the test.
 */
const char *dml_test_tmpdir_write(const char *name, const void *buf, size_t len, int gz);

/** Read up to cap bytes of the file at path into buf; how many it read. */
size_t dml_test_read_file(const char *path, void *buf, size_t cap);

#endif
