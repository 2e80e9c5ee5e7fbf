// Package plot draws the evaluation's figures as standalone SVG: line charts (with
// optional log axes, step lines for CDFs, point markers and vertical marks) and bar
// charts (grouped or stacked, with a label on each bar). No JavaScript, no fonts to
// load, no network: the SVG text is the figure.
//
// It draws only what it is given: it computes no statistics and reads no files.
// Colours follow the HelloBench report's (the baseline, containerd + overlayfs, in
// orange; Slacker in green), so figures of both reports read alike.
package plot
