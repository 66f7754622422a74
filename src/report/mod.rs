//! Outputs built from symbolized samples: `perf script` text, folded stacks, the flame graph, the top-frames table.
