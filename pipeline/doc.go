// Package pipeline trains a model cut into stages: a partitioner that cuts
// an imported graph where few and small tensors cross, balanced by
// estimated cost; stage programs compiled from the pieces (forward, and a
// backward fed by the gradient of the stage's outputs, split into input-
// and weight-gradient passes for the zero-bubble schedules); schedules
// (GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V) written out as explicit
// per-rank action lists with a simulator that checks them; and a runner
// that executes a schedule with one goroutine per device, passing
// activations and their gradients in memory.
package pipeline
