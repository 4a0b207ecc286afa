package powerlog

import (
	"fmt"
	"time"
)

// Layer is one resolution of the history: windows are added to buckets of
// every layer as they arrive, so each range is told from one layer's
// buckets without adding finer ones up at read time.
type Layer struct {
	// Res is a bucket's length in seconds; buckets start on multiples of
	// it since the Unix epoch.
	Res int64
	// Keep is how long a bucket is kept after it starts: as long as the
	// longest range told in the layer needs, and a little more.
	Keep time.Duration
}

// Layers are the history's resolutions, finest first: minutes for 1h,
// five minutes for 24h, hours for 7d and 30d (api.RangeResolution).
func Layers() []Layer {
	return []Layer{
		{60, 2 * time.Hour},
		{300, 25 * time.Hour},
		{3600, 31 * 24 * time.Hour},
	}
}

// Cutoff is the start (Unix seconds) before which the layer's buckets are
// no longer needed at now.
func (l Layer) Cutoff(now time.Time) int64 { return now.Add(-l.Keep).Unix() }

// layerOf is the layer of resolution res.
func layerOf(res time.Duration) (Layer, error) {
	for _, l := range Layers() {
		if time.Duration(l.Res)*time.Second == res {
			return l, nil
		}
	}
	return Layer{}, fmt.Errorf("no power history at %v resolution", res)
}

// hourly is the coarsest layer, whose buckets a day adds up from.
func hourly() Layer {
	ls := Layers()
	return ls[len(ls)-1]
}
