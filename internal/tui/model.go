package tui

import (
	"context"
	"time"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"

	"github.com/svc-dev/svc/internal/api"
)

// paneID names a pane; tab cycles through them in this order.
type paneID int

const (
	paneInflight paneID = iota
	paneWorkers
	paneTraffic
	panePower
	paneRental
	numPanes
)

func (p paneID) String() string {
	switch p {
	case paneInflight:
		return "in flight"
	case paneWorkers:
		return "workers"
	case paneTraffic:
		return "traffic"
	case panePower:
		return "power"
	case paneRental:
		return "rental spend"
	}
	return "?"
}

// pane is a sub-model the root delegates drawing to. Panes hold only their
// own UI state; the data they draw is the root's, shared through snapshot.
type pane interface {
	view(c common, d *snapshot, width, height int, focused bool) string
}

// common is what every view reads besides the data (glow's commonModel).
type common struct {
	st  *styles
	now time.Time
}

// snapshot is the newest data from the gateway. Each part is replaced when
// its call succeeds and kept when it fails, so an outage freezes the
// screen instead of blanking it.
type snapshot struct {
	inflight     []api.InflightRequest
	haveInflight bool
	workers      []api.Worker
	haveWorkers  bool
	// inflightDenied and workersDenied are the gateway's refusal of the
	// key (403) for what it may not read, "" otherwise: the pane says so
	// rather than wait for the gateway.
	inflightDenied, workersDenied string
	// usageDenied is the same for the usage the Traffic pane reads.
	usageDenied string
	latest      string
	power       powerHistory // the Power pane's chart; see power.go
	rental      rentalData   // the Rental spend pane's; see rental.go
	today       energyToday  // the fleet's energy today; see power.go
}

// wideWidth is where the panes go side by side: below it the lists need
// the whole width for their columns.
const wideWidth = 150

// maxRentalRows and maxRentalRowsNarrow cap the active rentals the Rental
// spend pane is given lines for in the wide and the stacked layouts; the
// pane's footer counts the rest.
const maxRentalRows, maxRentalRowsNarrow = 8, 4

// defaultWidth and defaultHeight are used until the first WindowSizeMsg.
const defaultWidth, defaultHeight = 80, 24

// Model is the dashboard. Update is the only writer of its state; slow work
// (polls, the events fetch, waits) runs in tea.Cmds that report back with
// messages.
type Model struct {
	src      Source
	ctx      context.Context // ends polls and ticks when the dashboard quits
	stop     context.CancelFunc
	interval time.Duration
	clock    func() time.Time
	target   string

	st     *styles
	keys   keyMap
	help   help.Model
	filter lineInput

	width, height int
	now           time.Time // the clock at the last message, so View is pure
	focus         paneID
	showHelp      bool
	filtering     bool // the filter input has the keyboard

	data       snapshot
	store      *api.StoreHealth // the gateway's store, as /healthz last told it
	inflight   inflightPane
	workers    workersPane
	traffic    trafficPane
	details    detailsModel
	detailsSeq int

	// Polling; see poll.go.
	paused  bool
	chain   bool // a poll, or the tick after one, is outstanding
	fails   int  // consecutive failed polls
	failure pollFailure
	retryIn time.Duration
	lastOK  time.Time // when a poll last returned data
	everOK  bool

	// The Power pane's history fetch; see power.go.
	historyBusy bool      // a fetch is in flight
	historyOf   string    // the worker last fetched
	historyAt   time.Time // when that fetch began
}

func newModel(ctx context.Context, src Source, opts Options, profile colorprofile.Profile) Model {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ctx, stop := context.WithCancel(ctx)
	st := newStyles(profile)

	h := help.New()
	h.Styles = st.help

	return Model{
		src:      src,
		ctx:      ctx,
		stop:     stop,
		interval: opts.Interval,
		clock:    opts.Now,
		target:   opts.Target,
		st:       st,
		keys:     newKeyMap(),
		help:     h,
		filter:   lineInput{limit: 64},
		now:      opts.Now(),
		chain:    true, // Init starts the poll chain
	}
}

// Init starts polling straight away rather than after the first interval.
func (m Model) Init() tea.Cmd { return m.pollCmd() }

func (m Model) pollCmd() tea.Cmd {
	return poll(m.ctx, m.src, m.clock, pollTimeout(m.interval))
}

// Update handles a message; see the message types for where each comes from.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	next, cmd := m.update(msg)
	m = next.(Model)
	// The chart follows its subject whatever moved it (a key, a filter, a
	// poll that dropped the selected worker), so it is checked after each
	// message rather than by each handler.
	if fetch := m.historyCmd(); fetch != nil {
		return m, tea.Batch(cmd, fetch)
	}
	return m, cmd
}

// update is Update before the history check.
func (m Model) update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.help.SetWidth(msg.Width)
		return m, nil
	case pollMsg:
		return m.applyPoll(msg)
	case tickMsg:
		m.now = msg.at
		if m.paused {
			m.chain = false // resuming starts a new chain
			return m, nil
		}
		return m, m.pollCmd()
	case historyMsg:
		m.historyBusy = false
		m.data.power = m.data.power.apply(msg)
		return m, nil
	case eventsMsg:
		if m.details.kind == workerDetails && msg.seq == m.details.seq {
			m.details.events, m.details.eventsErr, m.details.eventsLoaded = msg.events, msg.err, true
		}
		return m, nil
	case tea.KeyPressMsg:
		return m.handleKey(msg)
	}
	return m, nil
}

// applyPoll stores a poll's answers and schedules the next one: after the
// interval, or after a growing backoff while polls fail.
func (m Model) applyPoll(msg pollMsg) (tea.Model, tea.Cmd) {
	m.now = msg.at
	if msg.inflightErr == nil {
		m.data.inflight, m.data.haveInflight = msg.inflight, true
	}
	m.data.inflightDenied = denied(msg.inflightErr)
	if msg.workersErr == nil {
		m.data.workers, m.data.haveWorkers = msg.workers, true
		m.data.today = m.data.today.note(msg.workers, msg.at)
	}
	m.data.workersDenied = denied(msg.workersErr)
	m.data.usageDenied = denied(msg.summaryErr)
	if msg.latestErr == nil {
		m.data.latest = msg.latest
	}
	if msg.healthErr == nil {
		m.store = msg.health.Store
	}
	var sum *api.UsageSummary
	if msg.summaryErr == nil {
		sum = &msg.summary
	}
	var rows []api.UsageRow
	if msg.rowsErr == nil {
		rows = msg.rows
		if rows == nil {
			rows = []api.UsageRow{} // nil means "failed" to observe
		}
	}
	var inflight []api.InflightRequest
	if msg.inflightErr == nil {
		inflight = msg.inflight
		if inflight == nil {
			inflight = []api.InflightRequest{} // nil means "failed" to progress
		}
	}
	m.traffic.hist = m.traffic.hist.progress(inflight).observe(msg.at, sum, rows)
	m.data.rental = m.data.rental.apply(msg)
	m.syncLists()
	if m.details.kind != noDetails {
		m.details = m.details.refresh(&m.data)
	}

	errs := msg.failures()
	if len(errs) < pollParts { // something answered: the data is fresh
		m.lastOK, m.everOK = msg.at, true
	}
	var delay time.Duration
	if len(errs) == 0 {
		m.fails, m.failure = 0, pollFailure{}
		delay = m.interval
	} else {
		m.fails++
		m.failure = describe(errs)
		delay = backoff(m.interval, m.fails, m.failure.auth)
	}
	m.retryIn = delay
	return m, tick(m.ctx, delay, m.clock)
}

// historyCmd starts a fetch of the Power pane's subject's history when it
// is due: at once for a new subject, else historyEvery after the last
// fetch began. Never two at a time, nor while paused or after quitting.
func (m *Model) historyCmd() tea.Cmd {
	if m.historyBusy || m.paused || m.ctx.Err() != nil {
		return nil
	}
	w, ok := powerSubject(m.data.workers, m.workers.list)
	if !ok || (w.WorkerID == m.historyOf && m.now.Sub(m.historyAt) < historyEvery) {
		return nil
	}
	m.historyBusy, m.historyOf, m.historyAt = true, w.WorkerID, m.now
	return fetchHistory(m.ctx, m.src, w.WorkerID, pollTimeout(m.interval))
}

// list is the focused-list state of pane id, nil for panes without a list.
func (m *Model) list(id paneID) *listState {
	switch id {
	case paneInflight:
		return &m.inflight.list
	case paneWorkers:
		return &m.workers.list
	}
	return nil
}

// listIDs are the ids of pane id's rows as shown, filter applied.
func (m *Model) listIDs(id paneID) []string {
	switch id {
	case paneInflight:
		return inflightIDs(inflightRows(m.data.inflight, m.inflight.list.filter))
	case paneWorkers:
		return workerIDs(workerRows(m.data.workers, m.workers.list.filter))
	}
	return nil
}

func (m *Model) syncLists() {
	for _, id := range []paneID{paneInflight, paneWorkers} {
		*m.list(id) = m.list(id).sync(m.listIDs(id))
	}
}

func (m *Model) pane(id paneID) pane {
	switch id {
	case paneInflight:
		return m.inflight
	case paneWorkers:
		return m.workers
	case paneTraffic:
		return m.traffic
	case panePower:
		return powerPane{selection: m.workers.list}
	default:
		return rentalPane{}
	}
}

func (m Model) handleKey(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	if key.Matches(msg, m.keys.Interrupt) {
		return m.quit()
	}
	if m.filtering {
		return m.filterKey(msg)
	}
	if m.typesFilter(msg) {
		m.filtering = true
		m.filter = m.filter.set(m.list(m.focus).filter)
		return m.filterKey(msg)
	}
	switch {
	case key.Matches(msg, m.keys.Quit):
		return m.quit()
	case key.Matches(msg, m.keys.Help):
		m.showHelp = !m.showHelp
		return m, nil
	case key.Matches(msg, m.keys.Pause):
		m.paused = !m.paused
		if !m.paused && !m.chain {
			m.chain = true
			return m, m.pollCmd()
		}
		return m, nil
	}
	if m.details.kind != noDetails {
		return m.detailsKey(msg)
	}
	switch {
	case key.Matches(msg, m.keys.Next):
		m.focus = (m.focus + 1) % numPanes
	case key.Matches(msg, m.keys.Prev):
		m.focus = (m.focus + numPanes - 1) % numPanes
	case key.Matches(msg, m.keys.Up):
		m.move(-1)
	case key.Matches(msg, m.keys.Down):
		m.move(1)
	case key.Matches(msg, m.keys.Filter):
		if l := m.list(m.focus); l != nil {
			m.filtering = true
			m.filter = m.filter.set(l.filter)
		}
	case key.Matches(msg, m.keys.Details):
		return m.openDetails()
	case key.Matches(msg, m.keys.Back):
		if l := m.list(m.focus); l != nil {
			l.filter = ""
			m.syncLists()
		}
	}
	return m, nil
}

// typesFilter reports whether msg, pressed with no filter being typed, is
// the start of one: a printable key in a list (see keyMap), other than
// those that stay commands there because no name holds them.
func (m Model) typesFilter(msg tea.KeyPressMsg) bool {
	switch {
	case m.details.kind != noDetails || m.list(m.focus) == nil || msg.Text == "":
		return false
	case msg.Code == tea.KeySpace, key.Matches(msg, m.keys.Help, m.keys.Filter):
		return false
	}
	return true
}

func (m Model) quit() (tea.Model, tea.Cmd) {
	m.stop()
	return m, tea.Quit
}

func (m *Model) move(delta int) {
	if l := m.list(m.focus); l != nil {
		*l = l.move(delta, m.listIDs(m.focus))
	}
}

// filterKey handles a key while the filter is typed: the list narrows
// with every keystroke; the arrows still move the selection (k and j are
// text here), and tab keeps the filter and moves on as it would without
// one.
func (m Model) filterKey(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	l := m.list(m.focus)
	switch {
	case key.Matches(msg, m.keys.Clear):
		l.filter = ""
		m.filtering = false
	case key.Matches(msg, m.keys.Keep):
		m.filtering = false
	case key.Matches(msg, m.keys.Next, m.keys.Prev):
		m.filtering = false
		return m.handleKey(msg)
	case msg.Code == tea.KeyUp:
		m.move(-1)
	case msg.Code == tea.KeyDown:
		m.move(1)
	default:
		var ok bool
		if m.filter, ok = m.filter.update(msg); ok {
			l.filter = m.filter.String()
		}
	}
	m.syncLists()
	return m, nil
}

// openDetails opens the selected row's details. A worker's recent events
// are fetched now, once: they change rarely and the view is short-lived.
func (m Model) openDetails() (tea.Model, tea.Cmd) {
	switch m.focus {
	case paneInflight:
		rows := inflightRows(m.data.inflight, m.inflight.list.filter)
		if i := m.inflight.list.index(inflightIDs(rows)); i >= 0 {
			m.details = detailsModel{kind: requestDetails, req: rows[i]}
		}
	case paneWorkers:
		rows := workerRows(m.data.workers, m.workers.list.filter)
		if i := m.workers.list.index(workerIDs(rows)); i >= 0 {
			m.detailsSeq++
			m.details = detailsModel{kind: workerDetails, seq: m.detailsSeq, worker: rows[i]}
			return m, fetchEvents(m.ctx, m.src, m.detailsSeq, rows[i].WorkerID, pollTimeout(m.interval))
		}
	}
	return m, nil
}

func (m Model) detailsKey(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	switch {
	case key.Matches(msg, m.keys.Back):
		m.details = detailsModel{}
	case key.Matches(msg, m.keys.Up):
		m.details.scroll = max(0, m.details.scroll-1)
	case key.Matches(msg, m.keys.Down):
		w, h := m.size()
		m.details.scroll = min(m.details.scroll+1, m.details.maxScroll(m.common(), &m.data, w, m.bodyHeight(h)))
	}
	return m, nil
}

func (m Model) size() (w, h int) {
	if m.width <= 0 || m.height <= 0 {
		return defaultWidth, defaultHeight
	}
	return m.width, m.height
}

func (m Model) common() common { return common{st: m.st, now: m.now} }

// bodyHeight is what is left of height for panes after the header, the
// store's warning, the status bar and the help line.
func (m Model) bodyHeight(height int) int {
	h := height - 2
	if m.showHelp {
		h--
	}
	if storeAlert(m.store) {
		h--
	}
	return max(0, h)
}

// View is the whole screen, on the alternate screen: the dashboard is a
// full-screen program.
func (m Model) View() tea.View {
	v := tea.NewView(m.frame())
	v.AltScreen = true
	return v
}

// frame draws the whole screen: header, panes (or details), help, status.
func (m Model) frame() string {
	w, h := m.size()
	c := m.common()

	header := renderHeader(headerView{
		target:       m.target,
		workers:      len(m.data.workers),
		healthy:      countHealthy(m.data.workers),
		inflight:     len(m.data.inflight),
		haveWorkers:  m.data.haveWorkers && m.data.workersDenied == "",
		haveInflight: m.data.haveInflight && m.data.inflightDenied == "",
		now:          m.now,
	}, w, c.st)

	// A store that cannot write is the gateway's most urgent news: its
	// line goes right under the header, whatever pane is open.
	if storeAlert(m.store) {
		header = vjoin(header, renderStoreWarning(m.store, m.now, w, c.st))
	}

	var body string
	bh := m.bodyHeight(h)
	if m.details.kind != noDetails {
		body = m.details.view(c, &m.data, w, bh)
	} else {
		body = m.panes(c, w, bh)
	}

	var helpLine string
	if m.showHelp {
		isList := m.list(m.focus) != nil
		keys := contextKeys{km: m.keys, details: m.details.kind != noDetails, filtering: m.filtering, list: isList}
		helpLine = fitLine(c.st, m.help.View(keys), w)
	}

	status := renderStatus(statusView{
		paused:      m.paused,
		err:         m.failure.msg,
		retryIn:     m.retryIn,
		everOK:      m.everOK,
		age:         m.now.Sub(m.lastOK),
		interval:    m.interval,
		filtering:   m.filtering,
		typable:     m.details.kind == noDetails && m.list(m.focus) != nil,
		filterLabel: m.focus.String(),
		filterInput: m.filter.view(c.st),
	}, w, c.st)

	return vjoin(header, body, helpLine, status)
}

// panes lays the panes out in width×height. Narrow terminals stack them,
// the lists on top where the eye starts; wide ones put the lists on the
// left and traffic, power and rental on the right. Tiny ones show only the
// focused pane rather than five unreadable slivers.
func (m Model) panes(c common, width, height int) string {
	view := func(id paneID, w, h int) string {
		return m.pane(id).view(c, &m.data, w, h, m.focus == id)
	}
	switch {
	case height < 18 || width < 40:
		return view(m.focus, width, height)
	case width >= wideWidth:
		lw := width * 62 / 100
		rw := width - lw
		ih := height / 2
		left := vjoin(view(paneInflight, lw, ih), view(paneWorkers, lw, height-ih))
		// Traffic takes what its tallest sparklines use and rental spend a
		// line and one per active rental, up to maxRentalRows; power, whose
		// chart grows with the room, the rest, and keeps a few lines.
		th := min(height-6, 23)
		rh := max(3, min(3+m.data.rental.rentalRows(), 3+maxRentalRows, height-th-5))
		right := vjoin(view(paneTraffic, rw, th), view(panePower, rw, height-th-rh), view(paneRental, rw, rh))
		return hjoin(left, right)
	default:
		th := 5
		if height >= 32 { // room for taller sparklines
			th = min(height/3, 23)
		}
		// Power and rental spend share the bottom row, as tall as the
		// active rentals need, up to a few: the lists above matter more.
		bottom := max(3, min(3+m.data.rental.rentalRows(), 3+maxRentalRowsNarrow, height-th-8))
		rest := height - bottom - th
		ih := rest / 2
		pw := width / 2
		return vjoin(
			view(paneInflight, width, ih),
			view(paneWorkers, width, rest-ih),
			view(paneTraffic, width, th),
			hjoin(view(panePower, pw, bottom), view(paneRental, width-pw, bottom)),
		)
	}
}

func countHealthy(ws []api.Worker) int {
	n := 0
	for _, w := range ws {
		if w.Status == api.StatusHealthy {
			n++
		}
	}
	return n
}
