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

/* Appends a node (sources already checked by the caller); GS_NODE_NONE on a
 * sticky error or out of memory. */
uint32_t gs_graph__push(struct gs_graph *g, enum gs_op op, enum gs_rows rows, int64_t ne0,
                        const uint32_t *src, uint32_t n_src, const union gs_node_params *p);
/* Records msg as the graph's sticky error (if it has none) and returns GS_NODE_NONE. */
uint32_t gs_graph__fail(struct gs_graph *g, enum gs_status code, const char *msg);

#endif
