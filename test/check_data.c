/*
 * Unit tests of the IDX reader: small plain and gzipped files written to a
 * temporary folder, every error class with its message, a fuzz loop of
 * random and mutated files, image/label pairs, and Fashion-MNIST when the
 * Debian dataset package is installed.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "test/check_run.h"
#include "worker/data_idx.h"
#include "proto/dml_error.h"
#include "test/tmpdir.h"

#define FASHION "/usr/share/datasets/fashion-mnist/"

static const char *path_of(const char *name)
{
	static char p[DML_TEST_PATH_MAX];

	return dml_test_tmpdir_path(p, sizeof(p), name);
}

static void put_be32(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)(v >> 24);
	b[1] = (uint8_t)(v >> 16);
	b[2] = (uint8_t)(v >> 8);
	b[3] = (uint8_t)v;
}

/*
 * Build an IDX image in buf: header with the given type and sizes, then
 * `data` bytes of the pattern i * 7 + 3 (the header's sizes are not
 * consulted, so a file can lie). Returns the length.
 */
static size_t make_idx(uint8_t *buf, uint8_t type, uint32_t ndims, const uint32_t *dims,
		       size_t data)
{
	size_t n = 0;

	buf[n++] = 0;
	buf[n++] = 0;
	buf[n++] = type;
	buf[n++] = (uint8_t)ndims;
	for (uint32_t i = 0; i < ndims; i++, n += 4)
		put_be32(buf + n, dims[i]);
	for (size_t i = 0; i < data; i++)
		buf[n++] = (uint8_t)(i * 7 + 3);
	return n;
}

/* Expect load to fail with code and err equal to "<path>: <msg>". */
static void expect_error(const char *path, int code, const char *msg)
{
	struct dml_idx idx;
	char err[512], want[4600];
	int rc;

	memset(&idx, 0xa5, sizeof(idx));
	rc = dml_idx_load(path, &idx, err, sizeof(err));
	ck_assert_int_eq(rc, code);
	snprintf(want, sizeof(want), "%s: %s", path, msg);
	ck_assert_str_eq(err, want);
	ck_assert_ptr_null(idx.data);
	ck_assert_uint_eq(idx.count, 0);
}

static void check_shape_and_values(int gz)
{
	static const uint32_t shapes[4][4] = {
		{ 5 }, { 3, 4 }, { 3, 2, 4 }, { 2, 3, 1, 5 }
	};
	uint8_t buf[256];

	for (uint32_t nd = 1; nd <= 4; nd++) {
		const uint32_t *dims = shapes[nd - 1];
		uint64_t rec = 1;
		struct dml_idx idx;
		char err[256];
		size_t len;
		const char *p;

		for (uint32_t i = 1; i < nd; i++)
			rec *= dims[i];
		len = make_idx(buf, 0x08, nd, dims, dims[0] * rec);
		p = dml_test_tmpdir_write(gz ? "ok.gz" : "ok", buf, len, gz);
		ck_assert_int_eq(dml_idx_load(p, &idx, err, sizeof(err)), 0);
		ck_assert_uint_eq(idx.ndims, nd);
		for (uint32_t i = 0; i < 4; i++)
			ck_assert_uint_eq(idx.dims[i], i < nd ? dims[i] : 0);
		ck_assert_uint_eq(idx.count, dims[0]);
		ck_assert_uint_eq(idx.record_size, rec);
		for (uint64_t i = 0; i < idx.count * rec; i++)
			ck_assert_uint_eq(idx.data[i], (uint8_t)(i * 7 + 3));
		dml_idx_free(&idx);
		ck_assert_ptr_null(idx.data);
		ck_assert_uint_eq(idx.ndims, 0);
	}
}

START_TEST(plain_shapes_and_values)
{
	check_shape_and_values(0);
}
END_TEST

START_TEST(gzip_shapes_and_values)
{
	check_shape_and_values(1);
}
END_TEST

START_TEST(header_errors)
{
	static const uint32_t d5[5] = { 1, 1, 1, 1, 1 };
	static const uint32_t dz[3] = { 4, 0, 2 };
	static const uint32_t big[2] = { 0x10000, 0x10000 };
	static const uint32_t huge[4] = { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff };
	static const uint32_t cap[2] = { 0x4000, 0x10000 };
	static const uint8_t bad[8] = { 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 1 };
	uint8_t buf[64];
	size_t len;

	for (int gz = 0; gz <= 1; gz++) {
		expect_error(dml_test_tmpdir_write("magic", bad, 8, gz), DML_ECONF,
			     "bad magic 0x12345678 (not an IDX file)");
		len = make_idx(buf, 0x0d, 1, d5, 1);
		expect_error(dml_test_tmpdir_write("type", buf, len, gz), DML_ECONF,
			     "data type 0x0d not supported (only unsigned bytes, 0x08)");
		len = make_idx(buf, 0x08, 5, d5, 1);
		expect_error(dml_test_tmpdir_write("dims5", buf, len, gz), DML_ECONF,
			     "5 dimensions (1..4 allowed)");
		len = make_idx(buf, 0x08, 0, d5, 0);
		expect_error(dml_test_tmpdir_write("dims0", buf, len, gz), DML_ECONF,
			     "0 dimensions (1..4 allowed)");
		len = make_idx(buf, 0x08, 3, dz, 0);
		expect_error(dml_test_tmpdir_write("size0", buf, len, gz), DML_ECONF,
			     "size 0 in dimension 2");
		len = make_idx(buf, 0x08, 2, big, 4);
		expect_error(dml_test_tmpdir_write("big", buf, len, gz), DML_ECONF,
			     "0x100000000 bytes of data is over the limit");
		len = make_idx(buf, 0x08, 4, huge, 4);
		expect_error(dml_test_tmpdir_write("huge", buf, len, gz), DML_ECONF,
			     "data size overflows 64 bits (over the limit)");
		/* Exactly the cap passes the header check; the bytes are missing. */
		len = make_idx(buf, 0x08, 2, cap, 10);
		expect_error(dml_test_tmpdir_write("cap", buf, len, gz), DML_ECONF,
			     "truncated: record 1 of 16384 is incomplete");
		expect_error(dml_test_tmpdir_write("empty", buf, 0, gz), DML_ECONF,
			     "truncated: the header ends after 0 bytes");
		len = make_idx(buf, 0x08, 3, dz, 0);
		expect_error(dml_test_tmpdir_write("short", buf, 9, gz), DML_ECONF,
			     "truncated: the header ends after 9 bytes");
	}
}
END_TEST

START_TEST(truncated_and_trailing)
{
	static const uint32_t dims[3] = { 3, 2, 4 };
	uint8_t buf[128];
	size_t len = make_idx(buf, 0x08, 3, dims, 3 * 8);

	for (int gz = 0; gz <= 1; gz++) {
		/* 16 + 8 + 5 bytes: record 2's last 3 bytes are missing. */
		expect_error(dml_test_tmpdir_write("trunc", buf, len - 3 - 8, gz), DML_ECONF,
			     "truncated: record 2 of 3 is incomplete");
		expect_error(dml_test_tmpdir_write("trunc1", buf, len - 1, gz), DML_ECONF,
			     "truncated: record 3 of 3 is incomplete");
		make_idx(buf, 0x08, 3, dims, 3 * 8 + 1);
		expect_error(dml_test_tmpdir_write("trail", buf, len + 1, gz), DML_ECONF,
			     "trailing bytes after the last record (3)");
	}
}
END_TEST

START_TEST(gzip_stream_errors)
{
	static const uint32_t dims[2] = { 4, 50 };
	uint8_t buf[512], z[512];
	size_t len = make_idx(buf, 0x08, 2, dims, 200), zlen;
	const char *p = dml_test_tmpdir_write("z.gz", buf, len, 1);
	struct dml_idx idx;
	char err[256];

	zlen = dml_test_read_file(p, z, sizeof(z));
	ck_assert_uint_gt(zlen, 18);
	/* Without the 8-byte trailer (CRC, size) the data is all there. */
	p = dml_test_tmpdir_write("cut.gz", z, zlen - 8, 0);
	expect_error(p, DML_ECONF, "truncated: gzip stream cut short after the data");
	/* A wrong CRC. */
	z[zlen - 8] ^= 0xff;
	p = dml_test_tmpdir_write("crc.gz", z, zlen, 0);
	ck_assert_int_eq(dml_idx_load(p, &idx, err, sizeof(err)), DML_ECONF);
	ck_assert_ptr_nonnull(strstr(err, "gzip: "));
	ck_assert_ptr_null(idx.data);
	/* Only the gzip magic. */
	p = dml_test_tmpdir_write("magiconly.gz", z, 2, 0);
	ck_assert_int_eq(dml_idx_load(p, &idx, err, sizeof(err)), DML_ECONF);
	ck_assert_ptr_nonnull(strstr(err, p));
}
END_TEST

START_TEST(io_errors)
{
	struct dml_idx idx;
	char err[256], want[4600];
	const char *p = path_of("missing");

	ck_assert_int_eq(dml_idx_load(p, &idx, err, sizeof(err)), DML_EIO);
	snprintf(want, sizeof(want), "%s: cannot open: No such file or directory", p);
	ck_assert_str_eq(err, want);
	ck_assert_int_eq(dml_idx_load(dml_test_tmpdir(), &idx, err, sizeof(err)), DML_EIO);
	snprintf(want, sizeof(want), "%s: read: Is a directory", dml_test_tmpdir());
	ck_assert_str_eq(err, want);
	ck_assert_int_eq(dml_idx_load(NULL, &idx, err, sizeof(err)), DML_EINVAL);
	ck_assert_int_eq(dml_idx_load(p, NULL, NULL, 0), DML_EINVAL);
	/* err may be absent. */
	ck_assert_int_eq(dml_idx_load(p, &idx, NULL, 0), DML_EIO);
}
END_TEST

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
	g_rng ^= g_rng << 13;
	g_rng ^= g_rng >> 7;
	g_rng ^= g_rng << 17;
	return (uint32_t)(g_rng >> 32);
}

static int fuzz_one(const char *p)
{
	struct dml_idx idx;
	char err[256];
	int rc = dml_idx_load(p, &idx, err, sizeof(err));

	if (rc == 0) {
		uint64_t rec = 1;

		ck_assert_uint_ge(idx.ndims, 1);
		ck_assert_uint_le(idx.ndims, 4);
		for (uint32_t i = 1; i < idx.ndims; i++)
			rec *= idx.dims[i];
		ck_assert_uint_eq(idx.count, idx.dims[0]);
		ck_assert_uint_eq(idx.record_size, rec);
		ck_assert_ptr_nonnull(idx.data);
		/* ASan catches a buffer shorter than claimed. */
		ck_assert_uint_le(idx.data[idx.count * rec - 1], 255);
		dml_idx_free(&idx);
	} else {
		ck_assert_int_eq(rc, DML_ECONF);
		ck_assert_ptr_null(idx.data);
		ck_assert_int_eq(strncmp(err, p, strlen(p)), 0);
		ck_assert_uint_gt(strlen(err), strlen(p) + 2);
	}
	return rc;
}

START_TEST(fuzz_random_and_mutated)
{
	static const uint32_t dims[3] = { 3, 2, 4 };
	uint8_t seed[128], zseed[256], buf[256];
	size_t slen = make_idx(seed, 0x08, 3, dims, 24), zlen, n;
	const char *p;
	int ok = 0, bad = 0;

	zlen = dml_test_read_file(dml_test_tmpdir_write("seed.gz", seed, slen, 1), zseed, sizeof(zseed));
	for (int round = 0; round < 3000; round++) {
		int kind = round % 3;

		if (kind == 0) {
			n = rnd() % 48;
			for (size_t i = 0; i < n; i++)
				buf[i] = (uint8_t)rnd();
			/* Often keep a plausible magic so later checks get exercised. */
			if (n >= 4 && rnd() % 2) {
				buf[0] = buf[1] = 0;
				buf[2] = 0x08;
				buf[3] = (uint8_t)(rnd() % 6);
			}
		} else {
			const uint8_t *src = kind == 1 ? seed : zseed;
			size_t srclen = kind == 1 ? slen : zlen;
			uint32_t flips = 1 + rnd() % 4;

			memcpy(buf, src, srclen);
			n = srclen;
			for (uint32_t f = 0; f < flips; f++)
				buf[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
			if (rnd() % 4 == 0)
				n = rnd() % (n + 1);
			else if (rnd() % 8 == 0)
				buf[n++] = (uint8_t)rnd();
		}
		p = dml_test_tmpdir_write("fuzz", buf, n, 0);
		if (fuzz_one(p) == 0)
			ok++;
		else
			bad++;
	}
	/* Both outcomes were exercised (flips in the data leave a valid file). */
	ck_assert_int_gt(ok, 0);
	ck_assert_int_gt(bad, 0);
}
END_TEST

START_TEST(pair_checks)
{
	static const uint32_t im[3] = { 4, 2, 2 };
	static const uint32_t l4[1] = { 4 };
	static const uint32_t l3[1] = { 3 };
	static const uint32_t l2d[2] = { 4, 1 };
	uint8_t buf[128];
	struct dml_idx img, lab;
	char err[512], want[9000], ipath[4400];
	size_t len;
	const char *lp;

	len = make_idx(buf, 0x08, 3, im, 16);
	snprintf(ipath, sizeof(ipath), "%s", dml_test_tmpdir_write("img.gz", buf, len, 1));
	len = make_idx(buf, 0x08, 1, l4, 4);
	lp = dml_test_tmpdir_write("lab4", buf, len, 0);
	ck_assert_int_eq(dml_idx_load_pair(ipath, lp, &img, &lab, err, sizeof(err)), 0);
	ck_assert_uint_eq(img.count, 4);
	ck_assert_uint_eq(img.record_size, 4);
	ck_assert_uint_eq(lab.count, 4);
	ck_assert_uint_eq(lab.record_size, 1);
	dml_idx_free(&img);
	dml_idx_free(&lab);

	len = make_idx(buf, 0x08, 1, l3, 3);
	lp = dml_test_tmpdir_write("lab3", buf, len, 0);
	ck_assert_int_eq(dml_idx_load_pair(ipath, lp, &img, &lab, err, sizeof(err)),
			 DML_ECONF);
	snprintf(want, sizeof(want), "%s: 3 labels for 4 images in %s", lp, ipath);
	ck_assert_str_eq(err, want);
	ck_assert_ptr_null(img.data);
	ck_assert_ptr_null(lab.data);

	len = make_idx(buf, 0x08, 2, l2d, 4);
	lp = dml_test_tmpdir_write("lab2d", buf, len, 0);
	ck_assert_int_eq(dml_idx_load_pair(ipath, lp, &img, &lab, err, sizeof(err)),
			 DML_ECONF);
	snprintf(want, sizeof(want), "%s: 2 dimensions (labels must be 1-D)", lp);
	ck_assert_str_eq(err, want);
	ck_assert_ptr_null(img.data);

	lp = path_of("nolabels");
	ck_assert_int_eq(dml_idx_load_pair(ipath, lp, &img, &lab, err, sizeof(err)),
			 DML_EIO);
	ck_assert_int_eq(strncmp(err, lp, strlen(lp)), 0);
	ck_assert_ptr_null(img.data);
}
END_TEST

static void check_fashion(const char *images, const char *labels, uint64_t n)
{
	struct dml_idx img, lab;
	char err[512];
	uint64_t seen[10] = { 0 };

	ck_assert_int_eq(dml_idx_load_pair(images, labels, &img, &lab, err, sizeof(err)), 0);
	ck_assert_uint_eq(img.ndims, 3);
	ck_assert_uint_eq(img.count, n);
	ck_assert_uint_eq(img.dims[1], 28);
	ck_assert_uint_eq(img.dims[2], 28);
	ck_assert_uint_eq(img.record_size, 784);
	ck_assert_uint_eq(lab.count, n);
	for (uint64_t i = 0; i < n; i++) {
		ck_assert_uint_lt(lab.data[i], 10);
		seen[lab.data[i]]++;
	}
	/* Fashion-MNIST is balanced: n / 10 of each class. */
	for (int c = 0; c < 10; c++)
		ck_assert_uint_eq(seen[c], n / 10);
	dml_idx_free(&img);
	dml_idx_free(&lab);
}

START_TEST(fashion_mnist)
{
	if (access(FASHION "train-images-idx3-ubyte.gz", R_OK) != 0) {
		printf("check_data: Fashion-MNIST not installed, skipped\n");
		return;
	}
	check_fashion(FASHION "train-images-idx3-ubyte.gz",
		      FASHION "train-labels-idx1-ubyte.gz", 60000);
	check_fashion(FASHION "t10k-images-idx3-ubyte.gz",
		      FASHION "t10k-labels-idx1-ubyte.gz", 10000);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("data_idx");
	TCase *tc = tcase_create("core");

	dml_test_tmpdir_fixture(tc, "check_data", 0);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, plain_shapes_and_values);
	tcase_add_test(tc, gzip_shapes_and_values);
	tcase_add_test(tc, header_errors);
	tcase_add_test(tc, truncated_and_trailing);
	tcase_add_test(tc, gzip_stream_errors);
	tcase_add_test(tc, io_errors);
	tcase_add_test(tc, fuzz_random_and_mutated);
	tcase_add_test(tc, pair_checks);
	tcase_add_test(tc, fashion_mnist);
	suite_add_tcase(s, tc);
	return dml_check_run(s);
}
