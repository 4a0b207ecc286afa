package espeak

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// voiceList is what espeak-ng --voices reports.
type voiceList struct {
	// names are the voices clients choose from: espeak-ng's language
	// codes, sorted.
	names []string
	// files maps a name to the voice file that speaks it. espeak-ng -v
	// does not find every voice by its language code (chr-US-Qaaa-x-west
	// fails), but always by its file.
	files    map[string]string
	fallback string // en-us, else another English voice, else the first
}

// voiceList lists espeak-ng's voices, running it the first time.
func (e *Engine) voiceList(ctx context.Context) (*voiceList, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.voices != nil {
		return e.voices, nil
	}
	prog, err := e.program()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, prog, "--voices")
	cmd.WaitDelay = time.Second
	stderr := &headBuffer{max: maxStderr}
	cmd.Stderr = stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("list espeak-ng voices: %w%s", err, detail(stderr.b.Bytes()))
	}
	vs, err := parseVoices(out)
	if err != nil {
		return nil, fmt.Errorf("list espeak-ng voices: %w", err)
	}
	e.voices = vs
	return vs, nil
}

// parseVoices reads the table of espeak-ng --voices:
//
//	Pty Language       Age/Gender VoiceName          File                 Other Languages
//	 2  en-us           --/M      English_(America)  gmw/en-US            (en 3)
//
// Voice names have their spaces replaced by underscores, so the columns
// split on white space. A language listed twice keeps its first voice.
func parseVoices(table []byte) (*voiceList, error) {
	vs := &voiceList{files: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(table))
	for first := true; sc.Scan(); first = false {
		f := strings.Fields(sc.Text())
		if first || len(f) < 5 {
			continue
		}
		lang, file := f[1], f[4]
		if _, dup := vs.files[lang]; !dup {
			vs.files[lang] = file
			vs.names = append(vs.names, lang)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(vs.names) == 0 {
		return nil, errors.New("it listed no voices")
	}
	slices.Sort(vs.names)
	vs.fallback = vs.names[0]
	if i := slices.IndexFunc(vs.names, func(n string) bool { return n == "en" || strings.HasPrefix(n, "en-") }); i >= 0 {
		vs.fallback = vs.names[i]
	}
	if _, ok := vs.files["en-us"]; ok {
		vs.fallback = "en-us"
	}
	return vs, nil
}
