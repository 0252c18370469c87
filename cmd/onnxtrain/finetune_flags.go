package main

import (
	"github.com/spf13/pflag"

	"github.com/onnxtrain/onnxtrain/train"
)

// addFineTuneFlags adds the fine-tuning and export flags of `train`.
func addFineTuneFlags(f *pflag.FlagSet, cfg *train.Config) {
	f.BoolVar(&cfg.SaveTrainingGraph, "save-training-graph", false, "also write the training graph (BatchNorm in training mode, Dropout active) as model.train.onnx in --output; model.onnx is always the inference graph")
	f.IntVar(&cfg.NumClasses, "num-classes", 0, "replace the classifier head (the last Gemm or MatMul(+Add) producing the logits) with a freshly initialised one of this many classes (PyTorch nn.Linear initialisation, seeded by --seed)")
	f.StringVar(&cfg.Freeze, "freeze", "", "freeze parameters whose name matches this regexp (the inverse of --train-only)")
	f.StringArrayVar(&cfg.LRGroups, "lr-group", nil, "REGEX=LR: parameters whose name matches REGEX train with learning rate LR (scaled by the schedule like --lr); repeatable, the first match wins")
	f.BoolVar(&cfg.FreezeBN, "freeze-bn", false, "keep BatchNorm layers in inference mode while training: normalise with the running statistics and leave them unchanged")
	f.IntVar(&cfg.Workers, "workers", 0, "image folders: decode images on this many goroutines (0: one per CPU)")
	f.BoolVar(&cfg.RandomResizedCrop, "random-resized-crop", false, "image folders, training data: torchvision's RandomResizedCrop to --image-size (a random 8-100% of the area at aspect ratio 3/4-4/3, resized), seeded by --seed")
	f.IntVar(&cfg.ResizeSize, "resize", 0, "image folders: resize the shorter side to this and crop the centre --image-size square (torchvision's Resize + CenterCrop; the validation transform, and the training one without --random-resized-crop)")
}
