// Package analysis is the evaluation's workload analysis of the HelloBench corpus
// (`slacker-bench eval analysis`), after Slacker §4:
//
//   - image sizes, compressed and uncompressed, against the bytes a workload reads
//     to start, by category with amplification factors (Fig 5, 6);
//   - gzip against file-level and 4 KiB-block deduplication, per image and across
//     all images (Fig 7);
//   - the share of files, directories and bytes by layer depth (Fig 12), and the
//     share of the top, bottom and largest layer (Fig 13);
//   - in a second container of the same image, the reads a cache filled by the
//     first would serve (Fig 14).
//
// Sizes, deduplication and depth come from the corpus's layer blobs alone (no root).
// Bytes read come from running each workload under Slacker: the volume of a
// container records which 4 KiB blocks of its image it read (volume stats
// base_read_runs, the same level as the paper's blktrace of the block device), read
// from `slacker stats --json` before the container is removed.
package analysis
