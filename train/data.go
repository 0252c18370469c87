package train

import "fmt"

// OpenData opens the dataset at path as a batch source for prog.
func OpenData(cfg Config, path string, training bool, prog *Program) (BatchSource, error) {
	return nil, fmt.Errorf("data: not wired yet")
}
