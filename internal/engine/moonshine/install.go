package moonshine

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// requiredFiles are the files of an install that the runner of a model
// size needs.
func requiredFiles(size string) []string {
	model := filepath.Join("models", size, "quantized")
	return []string{
		"runner.mjs",
		"node_modules/onnxruntime-node/package.json",
		"node_modules/llama-tokenizer-js/package.json",
		"models/silero_vad_v5.onnx",
		filepath.Join(model, "encoder_model.onnx"),
		filepath.Join(model, "decoder_model_merged.onnx"),
	}
}

// checkInstall reports the first file missing from the install in dir, so
// that a worker says what is wrong before a request finds out.
func checkInstall(dir, size string) error {
	for _, name := range requiredFiles(size) {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err == nil && fi.Size() == 0 {
			err = fmt.Errorf("%s is empty", name)
		}
		if err != nil {
			return fmt.Errorf("moonshine install in %s is incomplete (run engines/moonshine/install.sh %s): %w", dir, dir, err)
		}
	}
	return nil
}

// program is the node to run the runner with.
func (e *Engine) program() (string, error) {
	node := e.cfg.Node
	if node == "" {
		node = "node"
	}
	path, err := exec.LookPath(node)
	if err != nil {
		return "", fmt.Errorf("moonshine needs node: %w", err)
	}
	return path, nil
}
