// Package train turns an imported ONNX model into a training program and
// runs it. Build makes a Program (forward, loss, backward, compiled by a
// backend). The Accelerator is Hugging Face accelerate's training loop in
// Go: prepare a model, optimizer, schedule and data loader, then step with
// Forward, Backward, ClipGradNorm and the optimizer, with gradient
// accumulation, mixed precision (bf16, fp16 with a GradScaler), data
// parallelism over distrib groups with ZeRO stages 1 and 2, and
// checkpoints that resume exactly. Run is the whole `onnxtrain train`
// loop behind one Config; SaveModel writes the trained model as ONNX and
// safetensors.
package train
