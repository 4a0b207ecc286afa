package tui

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
)

// These tests run the whole program in a synctest bubble with a fake
// Source, a fixed clock and a 10ms poll interval. With fixed data and a
// fixed clock every poll draws the same frame, so the final frame is
// stable however many polls ran; it is compared with View() of the final
// model rather than the raw output stream, whose redraws depend on timing.
// The polls, ticks and redraws wait on the bubble's clock, which moves
// only when the program waits, so a test waits for nothing but the
// program's own work.

const testTarget = "http://127.0.0.1:8080"

// teaRun is a program under test, with the frames its model drew. It is
// teatest's TestModel less the signal handling, which cannot run in a
// synctest bubble.
type teaRun struct {
	p      *tea.Program
	frames *frameLog
	done   chan struct{} // closed when the program has ended
	final  tea.Model     // set before done closes
}

// Send sends msg to the program.
func (tm *teaRun) Send(msg tea.Msg) { tm.p.Send(msg) }

// Type types s, a key at a time.
func (tm *teaRun) Type(s string) {
	for _, c := range s {
		tm.Send(tea.KeyPressMsg{Code: c, Text: string(c)})
	}
}

// frameLog records the frames a model draws. The program's output is no
// place to look for them: bubbletea v2 writes only the cells that changed
// since the last frame, so a line that changed is seldom there whole.
type frameLog struct {
	mu   sync.Mutex
	new  []string // drawn since the last take
	last string
	// drawn has a value once a frame was drawn since the last take.
	drawn chan struct{}
}

func (f *frameLog) add(frame string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if frame != f.last {
		f.new, f.last = append(f.new, frame), frame
		select {
		case f.drawn <- struct{}{}:
		default:
		}
	}
}

// take returns the frames drawn since the last take.
func (f *frameLog) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs := f.new
	f.new = nil
	return fs
}

// recorded is the dashboard with each frame it draws recorded.
type recorded struct {
	Model
	frames *frameLog
}

func (r recorded) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	m, cmd := r.Model.Update(msg)
	r.Model = m.(Model)
	return r, cmd
}

func (r recorded) View() tea.View {
	v := r.Model.View()
	r.frames.add(v.Content)
	return v
}

func startTea(t *testing.T, src Source, w, h int) *teaRun {
	t.Helper()
	return runTea(t, NewModel(src, Options{Interval: 10 * time.Millisecond, Now: fixedClock, Target: testTarget}), w, h)
}

// runTea runs m at w×h until the test quits it; a test that fails first
// has it killed.
func runTea(t *testing.T, m Model, w, h int) *teaRun {
	t.Helper()
	frames := &frameLog{drawn: make(chan struct{}, 1)}
	p := tea.NewProgram(recorded{m, frames}, tea.WithInput(nil), tea.WithOutput(io.Discard),
		tea.WithoutSignalHandler(), tea.WithWindowSize(w, h))
	tm := &teaRun{p: p, frames: frames, done: make(chan struct{})}
	go func() {
		defer close(tm.done)
		final, err := p.Run()
		if err != nil && !errors.Is(err, tea.ErrProgramKilled) {
			t.Errorf("the program failed: %v", err)
		}
		tm.final = final
	}()
	t.Cleanup(func() {
		p.Kill()
		<-tm.done
	})
	tm.Send(tea.WindowSizeMsg{Width: w, Height: h})
	return tm
}

// waitFor waits until the program has drawn a frame holding all of ss.
// Each wait looks at the frames drawn since the last one stopped, so it
// sees only what was drawn since.
func waitFor(t *testing.T, tm *teaRun, ss ...string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	var last string
	for {
		for _, f := range tm.frames.take() {
			if containsAll(f, ss...) {
				return
			}
			last = f
		}
		select {
		case <-tm.frames.drawn:
		case <-timeout:
			t.Fatalf("no frame holding %q within 5s; the last one drawn:\n%s", ss, last)
		}
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// send presses keys, named as bubbles/key names them: "tab", "down".
func send(tm *teaRun, keys ...string) {
	for _, k := range keys {
		tm.Send(press(k))
	}
}

// quit quits with ctrl+c, as a user would (which also ends the model's
// polls), and returns the final model.
func quit(t *testing.T, tm *teaRun) Model {
	t.Helper()
	send(tm, "ctrl+c")
	select {
	case <-tm.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the program did not quit")
	}
	return tm.final.(recorded).Model
}

func TestTeaPanes(t *testing.T) {
	titles := []string{"In flight", "Workers", "Traffic", "Power", "Rental spend"}
	for i, name := range []string{"inflight", "workers", "traffic", "power", "rental"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tm := startTea(t, newFake(), 80, 24)
				waitFor(t, tm, "local-sim")
				for range i {
					send(tm, "tab")
				}
				m := quit(t, tm)
				if m.focus != paneID(i) {
					t.Fatalf("focus = %v, want %v", m.focus, paneID(i))
				}
				view := m.View().Content
				requireSize(t, view, 80, 24)
				// The focused pane, and only it, has the heavy frame.
				if !strings.Contains(view, "┏━ "+titles[i]) || strings.Count(view, "┏━") != 1 {
					t.Errorf("pane %s is not the one highlighted:\n%s", titles[i], view)
				}
				golden(t, view)
			})
		})
	}
}

func TestTeaShiftTabWraps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := startTea(t, newFake(), 80, 24)
		waitFor(t, tm, "local-sim")
		send(tm, "shift+tab")
		if m := quit(t, tm); m.focus != paneRental {
			t.Errorf("shift+tab from the first pane focused %v, want the last", m.focus)
		}
	})
}

func TestTeaMoveSelection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := startTea(t, newFake(), 80, 24)
		waitFor(t, tm, "local-sim")
		send(tm, "down", "down", "down", "down") // the last row
		send(tm, "down")                         // stops at the end
		send(tm, "up")                           // back up one
		send(tm, "tab", "down")                  // the workers list has its own selection
		m := quit(t, tm)
		if got, want := m.inflight.list.selID, "req_b3f1d7aa"; got != want {
			t.Errorf("in-flight selection = %s, want %s", got, want)
		}
		if got, want := m.workers.list.selID, "wk_01hq3a"; got != want {
			t.Errorf("workers selection = %s, want %s", got, want)
		}
	})
}

func TestTeaFilter(t *testing.T) {
	start := func(t *testing.T) *teaRun {
		tm := startTea(t, newFake(), 80, 24)
		waitFor(t, tm, "local-sim")
		send(tm, "tab") // workers
		tm.Type("/gpu")
		return tm
	}
	t.Run("typing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tm := start(t)
			m := quit(t, tm)
			if !m.filtering || m.workers.list.filter != "gpu" {
				t.Fatalf("filtering=%v filter=%q", m.filtering, m.workers.list.filter)
			}
			golden(t, m.View().Content)
		})
	})
	t.Run("applied", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tm := start(t)
			send(tm, "backspace") // "gp"
			tm.Type("u-b")
			send(tm, "enter")
			m := quit(t, tm)
			view := m.View().Content
			if m.filtering || m.workers.list.filter != "gpu-b" {
				t.Fatalf("filtering=%v filter=%q", m.filtering, m.workers.list.filter)
			}
			if strings.Contains(view, "gpu-c") || !strings.Contains(view, "/gpu-b: 1 of 6") {
				t.Errorf("filter not applied:\n%s", view)
			}
			golden(t, view)
		})
	})
	t.Run("esc-clears", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tm := start(t)
			send(tm, "enter", "esc")
			m := quit(t, tm)
			if m.workers.list.filter != "" || !strings.Contains(m.View().Content, "1-4 of 6") {
				t.Errorf("esc left filter %q", m.workers.list.filter)
			}
		})
	})
	t.Run("esc-while-typing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tm := start(t)
			send(tm, "esc")
			m := quit(t, tm)
			if m.filtering || m.workers.list.filter != "" {
				t.Errorf("filtering=%v filter=%q", m.filtering, m.workers.list.filter)
			}
		})
	})
	t.Run("in-flight", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tm := startTea(t, newFake(), 80, 24)
			waitFor(t, tm, "local-sim")
			tm.Type("/70b")
			send(tm, "enter")
			send(tm, "down") // keys act on the list again once the filter is kept
			m := quit(t, tm)
			if m.inflight.list.filter != "70b" || m.inflight.list.selID != "req_b3f1d7aa" {
				t.Errorf("filter=%q selection=%s", m.inflight.list.filter, m.inflight.list.selID)
			}
		})
	})
	// In a list, a name typed straight away filters, whatever its letters
	// do elsewhere: q does not quit, p pause, k or j move.
	t.Run("type-ahead", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tm := startTea(t, newFake(), 80, 24)
			waitFor(t, tm, "local-sim")
			tm.Type("queued")
			waitFor(t, tm, "filter in flight: /queued")
			send(tm, "enter", "down")
			m := quit(t, tm)
			view := m.View().Content
			if m.filtering || m.paused || m.inflight.list.filter != "queued" || m.inflight.list.selID != "req_b3f1d7aa" {
				t.Fatalf("filtering=%v paused=%v filter=%q selection=%s", m.filtering, m.paused, m.inflight.list.filter, m.inflight.list.selID)
			}
			if !strings.Contains(view, "/queued: 1 of 5") {
				t.Errorf("filter not applied:\n%s", view)
			}
			golden(t, view)
		})
	})
	t.Run("type-ahead-extends", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tm := start(t)
			send(tm, "enter") // kept
			tm.Type("-b")     // typing again goes on from the kept filter
			if m := quit(t, tm); !m.filtering || m.workers.list.filter != "gpu-b" {
				t.Errorf("filtering=%v filter=%q", m.filtering, m.workers.list.filter)
			}
		})
	})
	t.Run("tab-keeps", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tm := start(t)
			send(tm, "tab")
			m := quit(t, tm)
			if m.filtering || m.focus != paneTraffic || m.workers.list.filter != "gpu" {
				t.Errorf("filtering=%v focus=%v filter=%q", m.filtering, m.focus, m.workers.list.filter)
			}
		})
	})
	t.Run("not-on-traffic", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tm := startTea(t, newFake(), 80, 24)
			waitFor(t, tm, "local-sim")
			send(tm, "tab", "tab")
			tm.Type("/")
			if m := quit(t, tm); m.filtering {
				t.Error("/ started a filter on the traffic pane")
			}
		})
	})
}

func TestTeaDetails(t *testing.T) {
	t.Run("worker", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fake := newFake()
			tm := startTea(t, fake, 80, 24)
			waitFor(t, tm, "local-sim")
			send(tm, "tab", "down", "enter") // gpu-a, second by name
			waitFor(t, tm, "model_loaded")
			m := quit(t, tm)
			fake.set(func(f *fakeSource) {
				if len(f.eventQs) != 1 || f.eventQs[0].WorkerID != "wk_01hq3a" || f.eventQs[0].Limit != eventsLimit {
					t.Errorf("events queries = %+v", f.eventQs)
				}
			})
			view := m.View().Content
			requireSize(t, view, 80, 24)
			golden(t, view)
		})
	})
	t.Run("request", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tm := startTea(t, newFake(), 80, 24)
			waitFor(t, tm, "local-sim")
			send(tm, "enter") // the oldest request
			waitFor(t, tm, "Request req_c9e2f5b0")
			m := quit(t, tm)
			golden(t, m.View().Content)
		})
	})
	t.Run("scroll", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tm := startTea(t, newFake(), 80, 16)
			waitFor(t, tm, "local-sim")
			send(tm, "tab", "down", "enter")
			waitFor(t, tm, "Worker gpu-a")
			for range 50 {
				tm.Type("j")
			}
			tm.Type("k")
			m := quit(t, tm)
			w, h := m.size()
			if max := m.details.maxScroll(m.common(), &m.data, w, m.bodyHeight(h)); m.details.scroll != max-1 {
				t.Errorf("scroll = %d, want one above the end (%d)", m.details.scroll, max-1)
			}
		})
	})
	for _, k := range []string{"esc", "backspace"} {
		t.Run("close-"+k, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tm := startTea(t, newFake(), 80, 24)
				waitFor(t, tm, "local-sim")
				send(tm, "enter", k)
				m := quit(t, tm)
				if m.details.kind != noDetails {
					t.Errorf("%s did not close the details", k)
				}
			})
		})
	}
}

func TestTeaPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake()
		tm := startTea(t, fake, 80, 24)
		waitFor(t, tm, "local-sim")
		send(tm, "space")
		waitFor(t, tm, "paused")
		// At most the poll already running when p was pressed completes.
		before, _ := fake.stats()
		time.Sleep(150 * time.Millisecond) // fifteen intervals
		if after, _ := fake.stats(); after > before+1 {
			t.Fatalf("%d polls while paused", after-before)
		}
		m := quit(t, tm)
		if !m.paused {
			t.Fatal("not paused")
		}
		view := m.View().Content
		if !strings.Contains(view, "❚❚ paused") {
			t.Errorf("no paused marker:\n%s", view)
		}
		golden(t, view)
	})
}

func TestTeaResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake()
		tm := startTea(t, fake, 80, 24)
		waitFor(t, tm, "local-sim")
		send(tm, "tab", "tab") // p pauses where typing does not filter
		tm.Type("p")
		waitFor(t, tm, "paused")
		time.Sleep(50 * time.Millisecond) // let the chain run out
		before, _ := fake.stats()
		tm.Type("p")
		waitFor(t, tm, "● live")
		time.Sleep(50 * time.Millisecond) // five intervals
		if n, _ := fake.stats(); n < before+3 {
			t.Fatalf("%d polls in five intervals after resuming", n-before)
		}
		if m := quit(t, tm); m.paused {
			t.Error("still paused")
		}
	})
}

func TestTeaHelp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := startTea(t, newFake(), 80, 24)
		waitFor(t, tm, "local-sim")
		tm.Type("?")
		m := quit(t, tm)
		view := m.View().Content
		requireSize(t, view, 80, 24)
		if !strings.Contains(view, "tab next pane") || !strings.Contains(view, "type filter") || !strings.Contains(view, "ctrl+c quit") {
			t.Errorf("no help line:\n%s", view)
		}
		golden(t, view)
	})
}

func TestTeaResize(t *testing.T) {
	for _, size := range []struct {
		name string
		w, h int
		// ready is drawn once the frame is complete: the wide layout
		// charts edge-1's power history, fetched after the first poll.
		ready string
	}{
		{"160x45", 160, 45, "no power readings in the last hour"},
		{"120x40", 120, 40, ""},
		{"60x12", 60, 12, ""}, // too small for five panes: the focused one only
	} {
		t.Run(size.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tm := startTea(t, newFake(), 80, 24)
				waitFor(t, tm, "local-sim")
				tm.Send(tea.WindowSizeMsg{Width: size.w, Height: size.h})
				if size.ready != "" {
					waitFor(t, tm, size.ready)
				}
				m := quit(t, tm)
				view := m.View().Content
				requireSize(t, view, size.w, size.h)
				golden(t, view)
			})
		})
	}
}

// TestTeaErrorRecovery takes the gateway away and brings it back: the
// error shows with the last data kept and marked stale, then clears, and
// new data shows.
func TestTeaErrorRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake()
		tm := startTea(t, fake, 80, 24)
		waitFor(t, tm, "local-sim")

		fake.set(func(f *fakeSource) {
			f.err = &client.ConnectError{Target: testTarget, Err: errors.New("dial tcp 127.0.0.1:8080: connect: connection refused")}
		})
		// Still polling, backing off up to five intervals.
		waitFor(t, tm, "retrying in 50ms")
		polls, _ := fake.stats()

		fake.set(func(f *fakeSource) {
			f.err = nil
			f.workers = append(f.workers, api.Worker{WorkerID: "wk_new", WorkerName: "a100-new", Status: api.StatusHealthy, Version: "v1.3.0"})
		})
		waitFor(t, tm, "a100-new", "● live")
		m := quit(t, tm)
		if after, _ := fake.stats(); after <= polls {
			t.Error("no poll after the gateway came back")
		}
		if m.failure.msg != "" || m.fails != 0 || m.retryIn != m.interval {
			t.Errorf("error not cleared: %+v fails=%d retryIn=%s", m.failure, m.fails, m.retryIn)
		}
		view := m.View().Content
		if strings.Contains(view, "unreachable") || !strings.Contains(view, "4/7 workers healthy") {
			t.Errorf("final view:\n%s", view)
		}
	})
}

// TestTeaErrorKeepsData checks the frame while the gateway is down: the
// data of the last good poll stays, with the error and its age.
func TestTeaErrorKeepsData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake()
		tm := startTea(t, fake, 80, 24)
		waitFor(t, tm, "local-sim")
		fake.set(func(f *fakeSource) {
			f.err = &client.ConnectError{Target: testTarget, Err: errors.New("connection refused")}
		})
		// Quit once the backoff has reached its ceiling, so the frame does not
		// depend on how many polls failed before the quit.
		waitFor(t, tm, "gateway unreachable", "retrying in 50ms")
		m := quit(t, tm)
		view := m.View().Content
		for _, want := range []string{"local-sim", "llama3.1:70b", "✖ gateway unreachable: connection refused", "stale 0s"} {
			if !strings.Contains(view, want) {
				t.Errorf("view lacks %q:\n%s", want, view)
			}
		}
		if m.fails < 1 || m.retryIn != backoff(m.interval, m.fails, false) {
			t.Errorf("no backoff: fails=%d retryIn=%s", m.fails, m.retryIn)
		}
		golden(t, view)
	})
}

func TestTeaAuthError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake()
		fake.set(func(f *fakeSource) { f.err = &client.Error{Status: 401, Message: "invalid API key"} })
		tm := startTea(t, fake, 100, 24)
		waitFor(t, tm, "unauthorized (401): invalid API key")
		m := quit(t, tm)
		if !m.failure.auth || m.retryIn != 5*m.interval {
			t.Errorf("auth failure retried after %s, want the slowest backoff %s", m.retryIn, 5*m.interval)
		}
		golden(t, m.View().Content)
	})
}

// TestTeaSlowPollsDoNotPileUp polls every millisecond a gateway that takes
// 30ms to answer: there must never be two polls at once.
func TestTeaSlowPollsDoNotPileUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFake()
		fake.set(func(f *fakeSource) { f.delay = 30 * time.Millisecond })
		tm := runTea(t, NewModel(fake, Options{Interval: time.Millisecond, Now: fixedClock}), 80, 24)
		time.Sleep(time.Second)
		quit(t, tm)
		polls, maxActive := fake.stats()
		if maxActive != 1 || polls < 3 {
			t.Errorf("polls=%d, at most %d at once; want several, one at a time", polls, maxActive)
		}
	})
}

// safeBuffer is an output that the program's goroutines may still be
// writing to while a test reads it.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTeaQuitKeys: q quits where nothing is typed, and is text in a list;
// ctrl+c quits anywhere, a filter being typed included.
func TestTeaQuitKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys []string // pressed after the first frame
		quit bool
	}{
		{"q-in-a-list-types", []string{"q"}, false},
		{"q-in-workers-types", []string{"tab", "q"}, false},
		{"q-on-traffic", []string{"tab", "tab", "q"}, true},
		{"q-on-rental", []string{"shift+tab", "q"}, true},
		{"q-in-details", []string{"enter", "q"}, true},
		{"q-after-a-kept-filter-types", []string{"/", "x", "enter", "q"}, false},
		{"ctrl+c-in-a-list", []string{"ctrl+c"}, true},
		{"ctrl+c-while-typing", []string{"/", "q", "ctrl+c"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tm := startTea(t, newFake(), 80, 24)
				waitFor(t, tm, "local-sim")
				send(tm, tc.keys...)
				synctest.Wait()
				select {
				case <-tm.done:
					if !tc.quit {
						t.Fatalf("%v quit", tc.keys)
					}
				default:
					if tc.quit {
						t.Fatalf("%v did not quit", tc.keys)
					}
					if m := quit(t, tm); !strings.HasSuffix(m.list(m.focus).filter, "q") {
						t.Errorf("q did not go to the filter: %q", m.list(m.focus).filter)
					}
				}
			})
		})
	}
}

// TestRunQuitsOnQ drives the program through its input: a model name typed
// in the first pane filters it, q included, and q quits from the Traffic
// pane, two tabs on.
func TestRunQuitsOnQ(t *testing.T) {
	var out safeBuffer
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), newFake(), Options{Interval: 10 * time.Millisecond, Target: testTarget}, strings.NewReader("qwen\t\tq"), &out)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("q did not quit")
	}
	if !strings.Contains(out.String(), "\x1b[?1049h") {
		t.Error("the alternate screen was not used")
	}
}

func TestRunEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var out safeBuffer
	start := time.Now()
	if err := Run(ctx, newFake(), Options{Interval: 10 * time.Millisecond, Target: testTarget}, nil, &out); err != nil {
		t.Fatalf("Run = %v, want nil when the context ends", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Error("Run outlived its context")
	}
	if !strings.Contains(out.String(), "svc top") {
		t.Error("nothing drawn")
	}
}
