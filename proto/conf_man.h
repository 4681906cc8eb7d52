/*
 * Option tables (conf.h) written as man(7) text, so that the manual pages'
 * configuration sections come from the tables the parser uses and cannot
 * drift from them.
 */
#ifndef DML_CONF_MAN_H
#define DML_CONF_MAN_H

#include <stdio.h>

#include "proto/conf.h"

/**
 * Write every section of schema as a .SS heading (its help, and whether it
 * may repeat) and every option as a .TP entry: the key and its default
 * ("required" where it has none), then the kind of value and the bounds
 * that --help prints, then the option's help. Text is escaped for roff.
 * Returns 0, DML_EINVAL on a NULL or inconsistent schema, DML_ENOMEM, or
 * DML_EIO when out cannot be written.
 */
int dml_conf_print_man(const struct dml_conf_schema *schema, FILE *out);

#endif
