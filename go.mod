module github.com/onnxtrain/onnxtrain

go 1.26.0

require (
	github.com/stretchr/testify v1.12.1
	google.golang.org/protobuf v1.36.12
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
