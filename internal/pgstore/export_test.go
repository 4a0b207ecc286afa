package pgstore

import "time"

// SetListenPing shortens the wait between checks of a listening
// connection.
func SetListenPing(s *Store, d time.Duration) { s.listenPing = d }
