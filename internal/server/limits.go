package server

import "log/slog"

// reservedFiles are the descriptors the gateway needs besides its client
// connections: the database and its lock, the listeners, the admin
// socket's clients, logs, and the worker links.
const reservedFiles = 256

// checkOpenFiles raises the open-file limit and warns, with the numbers,
// when it is below what maxConns client connections need: past it, accept
// fails and clients see refused connections instead of answers.
func checkOpenFiles(log *slog.Logger, maxConns int) {
	soft, hard, err := raiseOpenFiles()
	if err != nil {
		log.Warn("open-file limit", "err", err)
	}
	if hard == 0 {
		return
	}
	need := uint64(maxConns) + reservedFiles
	if soft < need {
		log.Warn("the open-file limit is below what --max-connections needs; raise it (ulimit -Hn, or LimitNOFILE= in a systemd unit) or lower --max-connections",
			"soft", soft, "hard", hard, "need", need, "max_connections", maxConns)
		return
	}
	log.Debug("open-file limit", "soft", soft, "hard", hard, "need", need)
}
