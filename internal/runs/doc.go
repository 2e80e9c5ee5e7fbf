// Package runs is a set of block numbers kept as maximal, disjoint, half-open runs
// [Start, End), so that its memory is proportional to the number of runs, never to
// the blocks they cover. A volume keeps the blocks of its delta in one; the prefetch
// package keeps the base blocks a volume read in another.
//
// It is pure and not safe for concurrent use: its owner guards it.
package runs
