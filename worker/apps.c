/*
 * The apps of this build (app.h), by name: the one list dml-worker, its
 * --eval, the profile and dml-bench look apps up in.
 *
 * Must never: list an app the scheduler's job check does not know
 * (proto/job_spec_check.c), or the other way round.
 */
#include <string.h>

#include "worker/app.h"

/* The first one is what a worker's profile times at start. */
const struct dml_app *const dml_apps[] = { &dml_app_lsq, &dml_app_mlp, &dml_app_sparse_lr,
						 &dml_app_mf, NULL };

const struct dml_app *dml_app_find(const char *name)
{
	for (size_t i = 0; name && dml_apps[i]; i++)
		if (strcmp(dml_apps[i]->name, name) == 0)
			return dml_apps[i];
	return NULL;
}
