/*
 * engine/graph/internal.h - declarations shared by the files of engine/graph
 * (builder, printing, passes). No other module includes this.
 */
#ifndef GS_GRAPH_INTERNAL_H
#define GS_GRAPH_INTERNAL_H

#include "engine/graph.h"

/* Copies s into the graph's arena; NULL on allocation failure. */
const char *gs_graph__strdup(struct gs_graph *g, const char *s);

/* True when node a and b compute the same value from the same sources. */
bool gs_graph__same_value(const struct gs_node *a, const struct gs_node *b);

/* The row count a printer shows: "T", "O" or the fixed count. */
const char *gs_graph__rows_str(const struct gs_node *n, char *buf, size_t len);

#endif
