// Package stat holds the statistics the evaluation reports: quantiles (median,
// percentiles), means, ratios of medians, empirical CDFs and a summary that says
// when samples are too spread out to trust. Pure functions, no I/O.
package stat
