package lambda

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// KeyEnv is the environment variable LoadAPIKey reads first.
const KeyEnv = "LAMBDA_API_KEY"

// KeyFile is the file in the data directory LoadAPIKey reads otherwise.
const KeyFile = "lambda.key"

// LoadAPIKey finds the Lambda API key: $LAMBDA_API_KEY, else
// <dataDir>/lambda.key, which must be readable by its owner alone. There
// is deliberately no flag: a key on a command line shows in ps and in
// shell history.
func LoadAPIKey(dataDir string) (string, error) {
	if k := strings.TrimSpace(os.Getenv(KeyEnv)); k != "" {
		return k, nil
	}
	path := filepath.Join(dataDir, KeyFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no Lambda API key: set %s or write the key to %s (mode 0600): %w", KeyEnv, path, err)
	}
	if err != nil {
		return "", fmt.Errorf("lambda key: %w", err)
	}
	defer f.Close()
	// The mode is read from the open file, so it is the mode of what is
	// read, not of whatever the path names by then.
	info, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("lambda key: %w", err)
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("lambda key: %s is not a regular file", path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 && runtime.GOOS != "windows" {
		return "", fmt.Errorf("lambda key: %s has mode %04o, so others can read it; it must be 0600 or stricter (chmod 600 %s)", path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("lambda key: %w", err)
	}
	k := strings.TrimSpace(string(b))
	if k == "" {
		return "", fmt.Errorf("lambda key: %s is empty", path)
	}
	return k, nil
}
