// Command finetune_resnet fine-tunes a PyTorch-exported ResNet with the
// Accelerator API, the way accelerate's README example does:
//
//	go run ./examples/finetune_resnet [-model M.onnx] [-data case.npz] [-steps N]
//
// By default it trains the repository's CIFAR-style ResNet fixture on its
// committed batch.
package main
