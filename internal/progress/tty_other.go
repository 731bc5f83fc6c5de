//go:build !linux

package progress

import "os"

// isTerminal guesses from the file's mode: a character device is most
// likely a terminal (or /dev/null, where a progress line does no harm).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
