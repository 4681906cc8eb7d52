/*
 * Error codes shared by every dml component and the public API.
 *
 * Functions return 0 on success or one negative DML_E... code; results go out
 * through trailing pointer arguments. dml_strerror() explains every code. The
 * numbers are part of the wire protocol (ERROR frames carry them): append new
 * codes, never renumber.
 */
#ifndef DML_DML_ERROR_H
#define DML_DML_ERROR_H

enum dml_error {
	DML_OK = 0,
	DML_ENOMEM = -1,          /* out of memory */
	DML_EINVAL = -2,          /* invalid argument */
	DML_EIO = -3,             /* system call failed, see errno in the log */
	DML_ECONN = -4,           /* connection failed or was lost */
	DML_ETIMEDOUT = -5,       /* timed out */
	DML_EAUTH = -6,           /* authentication failed */
	DML_ECLUSTER = -7,        /* peer belongs to another cluster */
	DML_ECONF = -8,           /* bad configuration */
	DML_ENOTFOUND = -9,       /* no such table, job or node */
	DML_ERANGE = -10,         /* key outside the server's range or table */
	DML_ESHAPE = -11,         /* value width or dtype does not match the table */
	DML_ECLOSED = -12,        /* handle or connection already closed */
	DML_ESECRET = -13,        /* secret file missing, empty or readable by others */
	DML_EROLE = -14,          /* request not allowed for the sender's role */
	DML_ESTATE = -15,         /* request not valid in the connection's state */
	DML_EINTR = -16,          /* the wait was interrupted (dml_interrupt) */
	DML_EAGAIN = -17,         /* the peer is not ready yet: try again shortly */
	DML_EFULL = -18,          /* a store's map is full */
	DML_EPARTIAL = -19,       /* a summed push is partly applied already */
	/* Malformed frames: each class has its own code. */
	DML_EFRAME_MAGIC = -20,   /* bad magic: not a dml peer */
	DML_EFRAME_VERSION = -21, /* unsupported protocol version */
	DML_EFRAME_TRUNC = -22,   /* stream ended inside a frame */
	DML_EFRAME_META = -23,    /* metadata length zero or over the limit */
	DML_EFRAME_PAYLOAD = -24, /* payload length over the limit */
	DML_EFRAME_LENGTH = -25,  /* lengths in header and metadata disagree */
	DML_EFRAME_DECODE = -26,  /* metadata is not a valid protobuf Meta */
	DML_EFRAME_TYPE = -27,    /* unknown message type */
	DML_EFRAME_COUNT = -28,   /* key/value counts do not match the payload */
	DML_EFRAME_KEYS = -29,    /* more keys than the configured limit */
	DML_EFRAME_FLAGS = -30,   /* reserved header flags set */
	DML_ERR_MIN = -31
};

/** Explain an error code; never NULL, also for unknown codes. */
const char *dml_strerror(int err);

#endif
