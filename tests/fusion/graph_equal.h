/* Whether two graphs are the same graph: the test of kf_graph_format's round trip. */
#ifndef KT_GRAPH_EQUAL_H
#define KT_GRAPH_EQUAL_H

#include <stdbool.h>
#include <stddef.h>

#include "kfuse.h"

/* Same inputs (names, shapes, dtypes, in order), same outputs (names, in order) computed by the
 * same operators with the same inputs and the values of every parameter, and the same sharing
 * (a node read twice in a is read twice in b). Node ids and scalar nodes' identity may differ (a
 * printed scalar is one constant per use). On a difference, why says where. */
bool kt_graph_equal(const kf_graph *a, const kf_graph *b, char *why, size_t why_size);

#endif
