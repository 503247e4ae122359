package keys

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// loadOrCreate returns the contents of path, or creates it (mode 0600, parent
// directories 0700) with what make returns. created reports which happened.
// The file is written to a temporary name and renamed into place, so a crash
// never leaves a half-written secret behind, and two processes racing to
// create it end up agreeing on one (the loser reads the winner's file).
func loadOrCreate(path string, make func() ([]byte, error)) (data []byte, created bool, err error) {
	data, err = os.ReadFile(path)
	if err == nil {
		return data, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("read %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("create directory for %s: %w", path, err)
	}
	data, err = make()
	if err != nil {
		return nil, false, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return nil, false, fmt.Errorf("create %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful link
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, false, fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return nil, false, fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return nil, false, fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	// Link, not rename: it fails if another process created path meanwhile,
	// and then that file wins.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			data, err = os.ReadFile(path)
			if err != nil {
				return nil, false, fmt.Errorf("read %s: %w", path, err)
			}
			return data, false, nil
		}
		return nil, false, fmt.Errorf("create %s: %w", path, err)
	}
	return data, true, nil
}
