/*
 * The registry of compute backends (backend.h): which ones this build has,
 * found by the name a worker's config gives.
 *
 * Must never: name a backend that was not built.
 */
#include "config.h"

#include <string.h>

#include "worker/backend.h"

static const struct dml_backend_ops *const backends[] = {
	&dml_backend_cpu,
#ifdef HAVE_CUDA
	&dml_backend_cuda,
#endif
	NULL
};

const char *const dml_backend_names[] = {
	"cpu",
#ifdef HAVE_CUDA
	"cuda",
#endif
	NULL
};

const struct dml_backend_ops *dml_backend_find(const char *name)
{
	if (!name)
		return NULL;
	for (size_t i = 0; backends[i]; i++)
		if (strcmp(backends[i]->name, name) == 0)
			return backends[i];
	return NULL;
}
