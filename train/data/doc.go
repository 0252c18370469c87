// Package data feeds training: datasets that gather whole batches at once
// (NumPy .npz arrays, IDX files of the MNIST family, folders of images) and
// a Loader that shuffles, batches, shards for data parallelism, prefetches
// in the background and resumes mid-epoch.
//
// Everything random here (shuffling, crops, flips) comes from PCG streams
// seeded by (seed, epoch, sample): the same seed gives the same batches on
// every run, machine, Go version and resume, but not the numbers torch's
// RNG would draw.
package data
