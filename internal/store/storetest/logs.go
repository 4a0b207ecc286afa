package storetest

import (
	"testing"
	"time"

	"github.com/svc-dev/svc/internal/store"
)

// Logs are the stores under test of the usage log, worker events and
// power history, fresh and empty.
type Logs struct {
	Usage  store.Usage
	Events store.Events
	Power  store.Power
	// Sync makes everything recorded so far readable: events and power
	// reports as well as usage rows.
	Sync func(t testing.TB)
	// Resend writes again what the store wrote last, as after a crash
	// between a shipment's commit and the outbox letting it go; nil for a
	// store that ships nothing.
	Resend func(t testing.TB)
	// Keyed is true for a store that keeps a usage row or an event once
	// however often it is recorded (by request id, by event id), and
	// applies a power report only past the worker's stored through: as
	// one that ships through an outbox must, since it sends again what
	// it is unsure it sent.
	Keyed bool
}

// OpenLogs returns fresh, empty stores, closed when t ends.
type OpenLogs func(t *testing.T) Logs

// Now is the clock of the suite: rows reach back four months from it, so
// that they span several calendar months.
var Now = time.Date(2026, 11, 15, 10, 0, 0, 0, time.UTC)

// Usage runs the usage log's conformance tests.
func Usage(t *testing.T, open OpenLogs) {
	runLogs(t, open, []logsCheck{
		{"TotalsEqualRowsUnderReplay", usageTotalsEqualRows},
		{"LogsNewestFirstFilteredAndPaged", usageLogsPaged},
		{"SameInstantNewestRecordedFirst", usageSameInstant},
		{"AggregatesAsRecorded", usageAggregates},
		{"PruneDeletesOlderRowsKeepsTotals", usagePrune},
		{"SyncReadsYourWrites", usageSync},
	})
}

// Events runs the worker events log's conformance tests.
func Events(t *testing.T, open OpenLogs) {
	runLogs(t, open, []logsCheck{
		{"ListNewestFirstFilteredAndPaged", eventsPaged},
		{"StoredOnceUnderReplay", eventsReplay},
		{"PruneOlderAtMostMax", eventsPrune},
	})
}

// Power runs the power history's conformance tests.
func Power(t *testing.T, open OpenLogs) {
	runLogs(t, open, []logsCheck{
		{"AddAndBuckets", powerAddAndBuckets},
		{"WindowsStoredOnceUnderResend", powerOnce},
		{"PruneEachLayer", powerPrune},
	})
}

// logsCheck is one conformance test of the logs.
type logsCheck struct {
	name string
	run  func(t *testing.T, l Logs)
}

// runLogs runs each check as a subtest, on stores of its own.
func runLogs(t *testing.T, open OpenLogs, checks []logsCheck) {
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.run(t, open(t)) })
	}
}

func ptr[T any](v T) *T { return &v }
