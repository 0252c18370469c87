// Command onnxtrain trains PyTorch-exported ONNX models and runs them, as
// one static binary. Its commands:
//
//	train            fine-tune a model (data parallel, mixed precision, checkpoints)
//	launch           start the processes of a data-parallel run (torchrun-style)
//	config           write a training configuration interactively
//	env              print the environment a bug report needs
//	inspect          summarise a model: inputs, parameters, ops, gradient support
//	run              inference on .npy/.npz inputs
//	conformance      run the ONNX backend test cases against a backend
//	bench            measure training and inference steps and GEMM
//	estimate-memory  the memory a training step needs, from the memory plan
//
// `onnxtrain <command> --help` lists each command's flags; logs go through
// logrus.
package main
