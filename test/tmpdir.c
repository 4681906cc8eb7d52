/*
 * tmpdir.c - the private temporary folder of a unit-test suite (see
 * tmpdir.h): mkdtemp under $TMPDIR, and its files and itself removed after.
 *
 * Must never remove anything outside the folder it made, nor go deeper
 * than two folders down: the tests write plain files, and a test's store
 * is a folder that holds one of its own (a server store's ckpt/).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "test/tmpdir.h"

static const char *g_prefix = "check";
static char g_dir[4096];

static void tmpdir_setup(void)
{
	const char *tmp = getenv("TMPDIR");

	if (!tmp || !*tmp)
		tmp = P_tmpdir;
	snprintf(g_dir, sizeof(g_dir), "%s/%s.XXXXXX", tmp, g_prefix);
	if (!mkdtemp(g_dir)) {
		perror("mkdtemp");
		exit(1);
	}
}

/* Remove the files in dir and dir itself, and its folders likewise down to depth more. */
static void remove_dir(const char *dir, int depth)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[DML_TEST_PATH_MAX + 256];

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (unlink(p) != 0 && depth > 0)
			remove_dir(p, depth - 1);
	}
	closedir(d);
	rmdir(dir);
}

static void tmpdir_teardown(void)
{
	remove_dir(g_dir, 2);
	g_dir[0] = '\0';
}

void dml_test_tmpdir_fixture(TCase *tc, const char *prefix, int per_test)
{
	g_prefix = prefix;
	if (per_test)
		tcase_add_checked_fixture(tc, tmpdir_setup, tmpdir_teardown);
	else
		tcase_add_unchecked_fixture(tc, tmpdir_setup, tmpdir_teardown);
}

const char *dml_test_tmpdir(void)
{
	return g_dir;
}

const char *dml_test_tmpdir_path(char *path, size_t len, const char *name)
{
	snprintf(path, len, "%s/%s", g_dir, name);
	return path;
}

const char *dml_test_tmpdir_write(const char *name, const void *buf, size_t len, int gz)
{
	static char p[DML_TEST_PATH_MAX];

	dml_test_tmpdir_path(p, sizeof(p), name);
	if (gz) {
		gzFile f = gzopen(p, "wb");

		ck_assert_ptr_nonnull(f);
		if (len)
			ck_assert_int_eq(gzwrite(f, buf, (unsigned)len), (int)len);
		ck_assert_int_eq(gzclose(f), Z_OK);
	} else {
		FILE *f = fopen(p, "wb");

		ck_assert_ptr_nonnull(f);
		ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
		ck_assert_int_eq(fclose(f), 0);
	}
	return p;
}

size_t dml_test_read_file(const char *path, void *buf, size_t cap)
{
	FILE *f = fopen(path, "rb");
	size_t n;

	ck_assert_ptr_nonnull(f);
	n = fread(buf, 1, cap, f);
	fclose(f);
	return n;
}
