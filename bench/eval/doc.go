// Package eval reproduces the evaluation of the papers Slacker starts from (Slacker
// FAST'16 §4, §6, §7; HP-Mapper SoCC'19; "Docker characterization on high
// performance SSDs"), each result by one command (`slacker-bench eval ITEM`), side by
// side with containerd + overlayfs in the same run: the workload analysis of the
// HelloBench corpus, micro-benchmarks, push/pull scalability, long-running servers,
// MultiMake, 64 containers from one image, and fio on several filesystems.
//
// This package holds what the items share beyond the rig (bench/rig): the record
// of a run as an item's JSON holds it (Meta: date, machine, commit and command from
// the rig's Record, elapsed time, notes, failures), the systems every item compares
// (Pair: overlayfs and Slacker, in the container root modes the item asks for:
// "slacker" for the default, shared roots, "slacker-block" for block clones) and
// how reports name and colour them, the Section every item's result renders as
// (figures, tables, headline numbers), cgroups, and small process helpers. Each item lives in its own
// subpackage; package report renders them all as one HTML page, and the command
// tree (`slacker-bench eval`) is in bench/cli.
//
// Nothing here asserts anything about a number: benchmarks are not tests. Items
// measure systems side by side in one run and report medians and ratios, with the
// spread of the samples so a reader can tell a noisy result.
package eval
