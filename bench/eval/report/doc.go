// Package report renders the evaluation's results as one HTML page (index.html) with
// its figures as SVG files next to it, and the same tables as Markdown
// (summary.md), from the JSON files the items wrote into one directory. It reads
// results; it never runs anything.
package report
