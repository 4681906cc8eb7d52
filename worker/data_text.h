/*
 * What the line-oriented data readers (libsvm, rating triplets) share: a
 * reader that cuts a plain or gzipped file (recognised by the gzip magic
 * 1f 8b, whatever the file is called) into lines of bounded length and
 * numbers them, the one way they report errors ("path: record N: reason"
 * or "path: reason"), geometric growth of arrays under a cap, and strict
 * parsing of tokens.
 *
 * Must never: store a line longer than the reader's limit, parse a number
 * with a function that skips what it does not understand, or read a token
 * past the [b, e) it was given.
 */
#ifndef DML_WORKER_DATA_TEXT_H
#define DML_WORKER_DATA_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* zlib's gzFile, named here so that includers need not see zlib.h. */
struct gzFile_s;

/* The usual limit on a line, bytes without its newline. */
#define DML_TEXT_LINE_MAX ((size_t)1 << 20)
/* Longest token dml_text_parse_double takes (a float needs far fewer). */
#define DML_TEXT_TOKEN_MAX 128

/**
 * A file being read line by line; storage the caller owns, set up by
 * dml_text_init and emptied by dml_text_close. The caller reads path,
 * line, llen and lineno; the rest is the reader's own.
 */
struct dml_text_reader {
	const char *path;         /* as given to dml_text_init (maybe NULL) */
	char *line;               /* the current line, without its newline */
	size_t llen;              /* its bytes; line[llen] is not a NUL */
	uint64_t lineno;          /* of the current line, from 1 */
	size_t line_max;          /* the longest line, bytes without newline */
	char *err;                /* where dml_text_fail writes */
	size_t errlen;
	struct gzFile_s *gz;
	int cut;                  /* the gzip stream ended without its trailer */
	int eof;
	char *chunk;              /* bytes read and not yet cut into lines */
	size_t clen, cpos;
	size_t lcap;              /* bytes line holds */
};

/**
 * Set r up for the file at path (NULL is named "(null)" in messages):
 * lines of at most line_max bytes, errors into err (cleared here when
 * errlen > 0). Opens nothing; dml_text_fail and dml_text_close work on r
 * from here on. path and err are borrowed until dml_text_close.
 */
void dml_text_init(struct dml_text_reader *r, const char *path, size_t line_max, char *err,
		   size_t errlen);

/**
 * Open the file given to dml_text_init for reading.
 *
 * @return 0; DML_EINVAL if the path is NULL; DML_EIO if the file cannot
 * be opened ("path: cannot open: reason"); DML_ENOMEM.
 */
int dml_text_open(struct dml_text_reader *r);

/**
 * The next line into r->line and r->llen, r->lineno counting it; *got is
 * 0 at the end of the file (when r->lineno is one past the last line). A
 * last line without a newline counts; a '\r' before a newline is kept.
 *
 * @return 0; DML_ECONF for a line over r->line_max bytes ("record N: line
 * over M bytes"), a corrupt or cut gzip stream; DML_EIO for a failed
 * read; DML_ENOMEM. The error is written to r->err.
 */
int dml_text_line(struct dml_text_reader *r, int *got);

/** Close the file and free the reader's buffers; r->line dies here. */
void dml_text_close(struct dml_text_reader *r);

/**
 * Write "path: record N: reason" (with_line, N = r->lineno) or
 * "path: reason" to r->err, cut to r->errlen; nothing when it has no
 * room.
 *
 * @return code, so that callers can `return dml_text_fail(...)`.
 */
int dml_text_fail(struct dml_text_reader *r, int code, int with_line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/**
 * Make the array *p of *cap elements of elem bytes hold need (need <= max)
 * of them: doubling from 1024 elements, never past max.
 *
 * @return 0 (*p and *cap updated); DML_ENOMEM (*p and *cap unchanged).
 */
int dml_text_grow(void **p, uint64_t *cap, uint64_t need, size_t elem, uint64_t max);

/** Non-zero for the blanks that separate tokens: space, \t, \r, \v, \f. */
int dml_text_is_space(char c);

/**
 * The next blank-separated token of [*p, end) as [*b, *e), *p moved past
 * it.
 *
 * @return 1; 0 when only blanks are left.
 */
int dml_text_token(const char **p, const char *end, const char **b, const char **e);

/**
 * The whole of [b, e) as a double, as strtod reads it (so "nan", "inf" and
 * out-of-range numbers parse: the caller checks what it can hold).
 *
 * @return 0; DML_EINVAL if the token is empty, over DML_TEXT_TOKEN_MAX
 * bytes, or not a number all through.
 */
int dml_text_parse_double(const char *b, const char *e, double *out);

/**
 * The whole of [b, e) as a decimal uint64: digits only, no sign.
 *
 * @return 0; DML_EINVAL if the token is empty, holds anything but digits,
 * or is over UINT64_MAX.
 */
int dml_text_parse_u64(const char *b, const char *e, uint64_t *out);

#endif
