// Package deploy holds deployment files (Kubernetes manifests, a Slurm batch
// script, a Dockerfile); it has no Go code, only tests that check that the
// files parse, that their fields are the ones Kubernetes and the Training
// Operator define, that the pieces agree with each other, and that their
// shell parts hand `onnxtrain` the environment and arguments they promise.
package deploy
