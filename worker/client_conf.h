/*
 * libdml's option table (client_opts.c): what dml_opts_set and a client
 * config file accept, for the parsers and for dml.conf(5)'s client keys.
 */
#ifndef DML_CLIENT_CONF_H
#define DML_CLIENT_CONF_H

#include "proto/conf.h"

extern const struct dml_conf_schema dml_client_conf_schema;

#endif
