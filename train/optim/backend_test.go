package optim

// The optimizers' steps run on the CPU backend.
import _ "github.com/onnxtrain/onnxtrain/backend/cpu"
