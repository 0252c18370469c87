// Package cpu is the pure-Go CPU backend. It registers itself as "cpu".
//
// Compilation inlines model-local functions, sorts the graph, lowers every op
// that has no kernel here to primitives, folds constants and removes dead
// nodes. Running walks the planned node list once per call.
package cpu
