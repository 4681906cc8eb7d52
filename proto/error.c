/*
 * Text for every DML_E... code. Keep in step with error.h.
 */
#include "proto/dml_error.h"

static const char *const messages[] = {
	[0] = "success",
	[1] = "out of memory",
	[2] = "invalid argument",
	[3] = "input/output error",
	[4] = "connection failed or lost",
	[5] = "timed out",
	[6] = "authentication failed",
	[7] = "peer belongs to another cluster",
	[8] = "bad configuration",
	[9] = "not found",
	[10] = "key outside the server's range or the table",
	[11] = "value width or dtype does not match the table",
	[12] = "closed",
	[13] = "secret file missing, empty or readable by others",
	[14] = "request not allowed for this role",
	[15] = "request not valid in this connection state",
	[16] = "interrupted",
	[17] = "not ready yet, try again shortly",
	[18] = "the store's map is full",
	[19] = "some pushes of a summed push are applied already: forward them one by one",
	[20] = "bad frame magic (not a dml peer)",
	[21] = "unsupported protocol version",
	[22] = "stream ended inside a frame",
	[23] = "frame metadata length zero or over the limit",
	[24] = "frame payload length over the limit",
	[25] = "frame lengths disagree",
	[26] = "frame metadata is not a valid message",
	[27] = "unknown message type",
	[28] = "key and value counts do not match the payload",
	[29] = "too many keys in one request",
	[30] = "reserved frame flags set",
};

const char *dml_strerror(int err)
{
	unsigned idx;

	if (err > 0 || err <= DML_ERR_MIN)
		return "unknown error";
	idx = (unsigned)-err;
	if (idx >= sizeof(messages) / sizeof(messages[0]) || !messages[idx])
		return "unknown error";
	return messages[idx];
}
