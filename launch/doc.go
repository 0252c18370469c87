// Package launch is the process supervisor behind `onnxtrain launch`: it
// starts the worker processes of one node with the environment torchrun
// gives its workers, prefixes their output with their rank, forwards
// signals to them, stops them all when one fails, and restarts them a
// bounded number of times.
//
// The workers find each other themselves (package distrib reads MASTER_ADDR,
// MASTER_PORT, RANK and WORLD_SIZE); the launcher only starts processes and
// sets their environment. On several machines, one launcher runs per machine
// with the same --nnodes, --master-addr and --master-port and its own
// --node-rank.
package launch
