package power

import (
	"cmp"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"
)

// readText reads a small sysfs file, without its trailing newline.
func readText(fsys fs.FS, name string) (string, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// readUint reads a sysfs file holding one unsigned number.
func readUint(fsys fs.FS, name string) (uint64, error) {
	s, err := readText(fsys, name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// numbered lists the entries of dir named prefix followed by a number
// (card0, hwmon12), in numeric order, as paths.
func numbered(fsys fs.FS, dir, prefix string) ([]string, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	type entry struct {
		n    int
		path string
	}
	var found []entry
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 {
			continue
		}
		found = append(found, entry{n, path.Join(dir, e.Name())})
	}
	slices.SortFunc(found, func(a, b entry) int { return cmp.Compare(a.n, b.n) })
	paths := make([]string, len(found))
	for i, e := range found {
		paths[i] = e.path
	}
	return paths, nil
}

// warnings logs each distinct problem of a source once: the same one
// would otherwise come back at every sample.
type warnings map[string]bool

func (w *warnings) warn(log *slog.Logger, msg string, err error) {
	key := msg
	if err != nil {
		key += ": " + err.Error()
	}
	if (*w)[key] {
		return
	}
	if *w == nil {
		*w = warnings{}
	}
	(*w)[key] = true
	if err == nil {
		log.Warn(msg)
		return
	}
	log.Warn(msg, "err", err)
}
