package espeak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

const (
	// maxWAV bounds what one request may produce: 64 MiB is 25 minutes of
	// espeak-ng's 22 kHz audio. Ordinary text at the gateway's 4,096
	// characters stays under 10 minutes even at the slowest speed, but a
	// character espeak-ng spells out by its long Unicode name can take
	// seconds each.
	maxWAV = 64 << 20
	// maxStderr is how much of espeak-ng's complaints are kept for the
	// error message.
	maxStderr = 512

	// espeak-ng speaks 175 words a minute by default and no slower than
	// 80; past 450 it speeds up with its built-in Sonic, which still
	// handles the 700 of the fastest speed the API allows (4).
	defaultWPM = 175
	minWPM     = 80
	maxWPM     = 700
)

var (
	errStart   = errors.New("start espeak-ng")
	errTooLong = fmt.Errorf("the text is too long to speak in one request: its audio would exceed %d MiB", maxWAV>>20)
)

// wordsPerMinute is espeak-ng's rate for an API speed (0 means 1).
func wordsPerMinute(speed float64) int {
	if !(speed > 0) { // NaN too
		speed = 1
	}
	return min(max(int(math.Round(defaultWPM*speed)), minWPM), maxWPM)
}

// speakable is text as espeak-ng reads all of it: it takes a NUL for the
// end of its input, and would drop whatever followed one without a word;
// as a space it is a pause, as other control characters are.
func speakable(text string) string { return strings.ReplaceAll(text, "\x00", " ") }

// speak runs espeak-ng on text and returns its WAV with the header sizes
// corrected. The text goes through stdin, so that none of it can be taken
// for an option and its length is not bounded by the command line's.
func (e *Engine) speak(ctx context.Context, text, voiceFile string, wpm int) ([]byte, error) {
	prog, err := e.program()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errStart, err)
	}
	cmd := exec.CommandContext(ctx, prog, "--stdout", "--stdin", "-b", "1",
		"-v", voiceFile, "-s", strconv.Itoa(wpm))
	// Killing espeak-ng closes its pipes; the delay only matters if it left
	// a child holding them.
	cmd.WaitDelay = time.Second
	cmd.Stdin = strings.NewReader(speakable(text))
	stdout := &limitedBuffer{max: e.maxWAV}
	stderr := &headBuffer{max: maxStderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: %w", errStart, err)
	}
	err = cmd.Wait()
	switch {
	case stdout.over:
		return nil, errTooLong
	case err != nil:
		return nil, fmt.Errorf("espeak-ng failed: %w%s", err, detail(stderr.b.Bytes()))
	}
	wav, err := fixWAVSizes(stdout.b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("espeak-ng wrote a bad WAV: %w%s", err, detail(stderr.b.Bytes()))
	}
	return wav, nil
}

// detail is what a process wrote to stderr, on one line, for an error
// message: ": " and the text, or nothing.
func detail(stderr []byte) string {
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(stderr), "")), " ")
	if s == "" {
		return ""
	}
	return ": " + s
}

// limitedBuffer is a buffer that refuses to grow past max. The refusal
// makes exec stop copying and close the pipe, so espeak-ng dies of it
// rather than speaking on.
type limitedBuffer struct {
	b    bytes.Buffer
	max  int
	over bool
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if l.b.Len()+len(p) > l.max {
		l.over = true
		return 0, errTooLong
	}
	return l.b.Write(p)
}

// headBuffer keeps the first max bytes written to it and drops the rest.
// It never fails: a failing stderr would kill espeak-ng.
type headBuffer struct {
	b   bytes.Buffer
	max int
}

func (h *headBuffer) Write(p []byte) (int, error) {
	if room := h.max - h.b.Len(); room > 0 {
		h.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
