package ops

import (
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/control"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/elementwise"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/gradient"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/linalg"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/nn"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/optimizer"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/reduce"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/sequence"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/shape"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/training"
)
