// Package multimake is the evaluation's MultiMake case study (`slacker-bench eval
// multimake`, Slacker §7): one C program compiled by every gcc and clang Debian
// bookworm offers, each compiler its own image, on a cold node, Slacker vs containerd
// + overlayfs; the time of each phase (pull the compiler's image, compile in a
// container, test the binary, delete the image) and the binaries' run times.
//
// The images are built by the corpus builder (bench/corpus) from a workloads file
// embedded here (minbase + libc6-dev + one compiler, the program in the app layer),
// so they share their base layers as the paper's compiler images did. A container
// compiles the program and writes the binary to its standard output (the CLIs have
// no bind mounts); the binary is then run on the host, where every compiler's binary
// meets the same CPU. It asserts nothing about the numbers.
package multimake
